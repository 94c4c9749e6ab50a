package main

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"
)

const (
	adminUser   = "ruleop-admin"
	adminGroups = "system:masters"
	certTTL     = 365 * 24 * time.Hour
)

// credentials are the files and secrets the apiserver and its clients share.
type credentials struct {
	dir            string
	caPEM          []byte // trust anchor for the serving certificate
	caCert         string // path of caPEM, kept so a restart trusts the same CA
	servingCert    string // path of the apiserver's TLS certificate
	servingKey     string // path of its private key
	serviceAccount string // path of the RSA key that signs and verifies SA tokens
	tokenFile      string // path of the static token file
	adminToken     string // bearer token of adminUser in system:masters
}

func credentialPaths(dir string) *credentials {
	return &credentials{
		dir:            dir,
		caCert:         filepath.Join(dir, "ca.crt"),
		servingCert:    filepath.Join(dir, "apiserver.crt"),
		servingKey:     filepath.Join(dir, "apiserver.key"),
		serviceAccount: filepath.Join(dir, "sa.key"),
		tokenFile:      filepath.Join(dir, "tokens.csv"),
	}
}

// loadOrGenerateCredentials reuses the credentials a previous run left in dir
// (so a restarted control plane keeps its CA, serving certificate, admin
// token and service-account key, and every kubeconfig and token issued before
// stays valid), or writes fresh ones when dir holds none. A partial set is
// replaced as a whole: mixing old and new files would not verify.
func loadOrGenerateCredentials(dir string) (*credentials, bool, error) {
	c := credentialPaths(dir)
	if c.complete() {
		err := c.load()
		return c, err == nil, err
	}
	c, err := generateCredentials(dir)
	return c, false, err
}

// complete reports whether every credential file exists.
func (c *credentials) complete() bool {
	for _, path := range []string{c.caCert, c.servingCert, c.servingKey, c.serviceAccount, c.tokenFile} {
		if _, err := os.Stat(path); err != nil {
			return false
		}
	}
	return true
}

// load reads back the CA and the admin token; the apiserver reads the other
// files itself.
func (c *credentials) load() error {
	ca, err := os.ReadFile(c.caCert)
	if err != nil {
		return err
	}
	if block, _ := pem.Decode(ca); block == nil || block.Type != "CERTIFICATE" {
		return fmt.Errorf("%s: no PEM certificate", c.caCert)
	}
	c.caPEM = ca
	tokens, err := os.ReadFile(c.tokenFile)
	if err != nil {
		return err
	}
	token, _, found := strings.Cut(string(tokens), ",")
	if !found || token == "" {
		return errors.New(c.tokenFile + ": no admin token line")
	}
	c.adminToken = token
	return nil
}

// generateCredentials writes a fresh CA, a serving certificate for
// 127.0.0.1/localhost, a service-account key and a static token file to dir.
func generateCredentials(dir string) (*credentials, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c := credentialPaths(dir)
	steps := []func() error{c.writeServingPair, c.writeServiceAccountKey, c.writeTokenFile}
	for _, step := range steps {
		if err := step(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *credentials) writeServingPair() error {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	caTmpl := certTemplate("ruleop-test-ca")
	caTmpl.IsCA = true
	caTmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		return err
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	c.caPEM = pemBlock("CERTIFICATE", caDER)
	if err := os.WriteFile(c.caCert, c.caPEM, 0o600); err != nil {
		return err
	}

	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := certTemplate("kube-apiserver")
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	tmpl.IPAddresses = []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 0, 0, 1)}
	tmpl.DNSNames = []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, key.Public(), caKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(c.servingCert, pemBlock("CERTIFICATE", der), 0o600); err != nil {
		return err
	}
	return writeKey(c.servingKey, key)
}

func (c *credentials) writeServiceAccountKey() error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	return writeKey(c.serviceAccount, key)
}

func (c *credentials) writeTokenFile() error {
	secret := make([]byte, 24)
	if _, err := rand.Read(secret); err != nil {
		return err
	}
	c.adminToken = hex.EncodeToString(secret)
	line := fmt.Sprintf("%s,%s,%s,%q\n", c.adminToken, adminUser, adminUser, adminGroups)
	return os.WriteFile(c.tokenFile, []byte(line), 0o600)
}

func certTemplate(commonName string) *x509.Certificate {
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	now := time.Now()
	return &x509.Certificate{
		SerialNumber:          serial,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(certTTL),
		BasicConstraintsValid: true,
	}
}

func writeKey(path string, key crypto.PrivateKey) error {
	der, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return err
	}
	return os.WriteFile(path, pemBlock("PRIVATE KEY", der), 0o600)
}

func pemBlock(kind string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der})
}
