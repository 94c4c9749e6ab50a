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
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
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
	servingCert    string // path of the apiserver's TLS certificate
	servingKey     string // path of its private key
	serviceAccount string // path of the RSA key that signs and verifies SA tokens
	tokenFile      string // path of the static token file
	adminToken     string // bearer token of adminUser in system:masters
}

// generateCredentials writes a fresh CA, a serving certificate for
// 127.0.0.1/localhost, a service-account key and a static token file to dir.
func generateCredentials(dir string) (*credentials, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	c := &credentials{
		dir:            dir,
		servingCert:    filepath.Join(dir, "apiserver.crt"),
		servingKey:     filepath.Join(dir, "apiserver.key"),
		serviceAccount: filepath.Join(dir, "sa.key"),
		tokenFile:      filepath.Join(dir, "tokens.csv"),
	}
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
