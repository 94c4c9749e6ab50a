package main

import (
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const contextName = "ruleop-test"

// adminRESTConfig is a client config for adminUser (group system:masters)
// that verifies the apiserver against the generated CA.
func adminRESTConfig(serverURL string, creds *credentials) *rest.Config {
	return &rest.Config{
		Host:            serverURL,
		BearerToken:     creds.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: creds.caPEM},
	}
}

// writeKubeconfig writes an admin kubeconfig to path and returns its
// absolute path. The CA is embedded, so no TLS verification is skipped.
func writeKubeconfig(path, serverURL string, creds *credentials) (string, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(abs), 0o700); err != nil {
		return "", err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters[contextName] = &clientcmdapi.Cluster{
		Server:                   serverURL,
		CertificateAuthorityData: creds.caPEM,
	}
	cfg.AuthInfos[contextName] = &clientcmdapi.AuthInfo{Token: creds.adminToken}
	cfg.Contexts[contextName] = &clientcmdapi.Context{
		Cluster:   contextName,
		AuthInfo:  contextName,
		Namespace: "default",
	}
	cfg.CurrentContext = contextName
	return abs, clientcmd.WriteToFile(*cfg, abs)
}
