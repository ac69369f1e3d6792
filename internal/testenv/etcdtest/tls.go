package etcdtest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// TLSFiles names the PEM files of a cluster started with Options.TLS: the
// certificate authority that signed everything, and a client certificate
// the members require.
type TLSFiles struct {
	CA, ClientCert, ClientKey string
	serverCert, serverKey     string
}

// writeTLSFiles creates a throw-away certificate authority in dir, a server
// certificate for 127.0.0.1 and a client certificate, all valid for a day.
func writeTLSFiles(dir string) (*TLSFiles, error) {
	f := &TLSFiles{
		CA:         filepath.Join(dir, "ca.pem"),
		ClientCert: filepath.Join(dir, "client.pem"),
		ClientKey:  filepath.Join(dir, "client-key.pem"),
		serverCert: filepath.Join(dir, "server.pem"),
		serverKey:  filepath.Join(dir, "server-key.pem"),
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "etcdtest CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		IsCA:                  true,
		KeyUsage:              x509.KeyUsageCertSign,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, err
	}
	if err := writePEM(f.CA, "CERTIFICATE", caDER); err != nil {
		return nil, err
	}
	for i, leaf := range []struct {
		cert, key string
		tmpl      x509.Certificate
	}{
		{f.serverCert, f.serverKey, x509.Certificate{
			Subject:     pkix.Name{CommonName: "etcdtest member"},
			IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
			DNSNames:    []string{"localhost"},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		}},
		{f.ClientCert, f.ClientKey, x509.Certificate{
			Subject:     pkix.Name{CommonName: "etcdtest client"},
			ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		}},
	} {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return nil, err
		}
		tmpl := leaf.tmpl
		tmpl.SerialNumber = big.NewInt(int64(i + 2))
		tmpl.NotBefore, tmpl.NotAfter = ca.NotBefore, ca.NotAfter
		tmpl.KeyUsage = x509.KeyUsageDigitalSignature
		der, err := x509.CreateCertificate(rand.Reader, &tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return nil, err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return nil, err
		}
		if err := writePEM(leaf.cert, "CERTIFICATE", der); err != nil {
			return nil, err
		}
		if err := writePEM(leaf.key, "EC PRIVATE KEY", keyDER); err != nil {
			return nil, err
		}
	}
	return f, nil
}

func writePEM(path, typ string, der []byte) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600)
}

// clientTLS is the TLS configuration of a client of the cluster.
func (f *TLSFiles) clientTLS() (*tls.Config, error) {
	ca, err := os.ReadFile(f.CA)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("etcdtest: no certificate in %s", f.CA)
	}
	cert, err := tls.LoadX509KeyPair(f.ClientCert, f.ClientKey)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, nil
}
