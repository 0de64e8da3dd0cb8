package ingest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/switchyard-dev/switchyard/config"
)

// SASL mechanisms and TLS from the config reach a broker that requires
// them (kfake, in-process: the local Apache Kafka runs plaintext only).
func TestClientOptsAuthenticate(t *testing.T) {
	t.Parallel()
	caFile, serverTLS := selfSignedTLS(t)
	cluster, err := kfake.NewCluster(kfake.EnableSASL(), kfake.TLS(serverTLS),
		kfake.Superuser("PLAIN", "plain-user", "plain-pass"),
		kfake.Superuser("SCRAM-SHA-256", "s256", "pass-256"),
		kfake.Superuser("SCRAM-SHA-512", "s512", "pass-512"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	for _, tc := range []struct {
		mech, user, pass string
		ok               bool
	}{
		{"PLAIN", "plain-user", "plain-pass", true},
		{"PLAIN", "plain-user", "wrong", false},
		{"SCRAM-SHA-256", "s256", "pass-256", true},
		{"SCRAM-SHA-512", "s512", "pass-512", true},
		{"SCRAM-SHA-512", "s512", "wrong", false},
	} {
		t.Run(tc.mech+"/"+tc.pass, func(t *testing.T) {
			t.Parallel()
			opts, err := ClientOpts(config.Kafka{Brokers: cluster.ListenAddrs(),
				TLS:  &config.KafkaTLS{CAFile: caFile, ServerName: "127.0.0.1"},
				SASL: &config.KafkaSASL{Mechanism: tc.mech, Username: tc.user, Password: tc.pass}}, nil)
			if err != nil {
				t.Fatal(err)
			}
			cl, err := kgo.NewClient(append(opts, kgo.RequestRetries(0))...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err = cl.Ping(ctx)
			if tc.ok && err != nil {
				t.Fatalf("ping: %v", err)
			}
			if !tc.ok && err == nil {
				t.Fatal("ping with a wrong password succeeded")
			}
			if err != nil && strings.Contains(err.Error(), tc.pass) {
				t.Fatalf("error leaks the password: %v", err)
			}
		})
	}
}

func TestClientOptsErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		k    config.Kafka
		want string
	}{
		{"missing CA file", config.Kafka{TLS: &config.KafkaTLS{CAFile: filepath.Join(dir, "nope.pem")}}, "kafka.tls.ca_file"},
		{"CA file without PEM", config.Kafka{TLS: &config.KafkaTLS{CAFile: notPEM}}, "no PEM certificate"},
		{"bad key pair", config.Kafka{TLS: &config.KafkaTLS{CertFile: notPEM, KeyFile: notPEM}}, "kafka.tls.cert_file"},
		{"oauth without token", config.Kafka{SASL: &config.KafkaSASL{Mechanism: "OAUTHBEARER"}}, "kafka.sasl.token_file"},
	} {
		if _, err := ClientOpts(tc.k, nil); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: err %v, want it to name %q", tc.name, err, tc.want)
		}
	}
	// The token file is read at each authentication, so rotation needs no restart.
	tokFile := filepath.Join(dir, "token")
	fn := fileToken(tokFile)
	if _, err := fn(context.Background()); err == nil {
		t.Fatal("missing token file: want an error")
	}
	for _, tok := range []string{"first", "second"} {
		if err := os.WriteFile(tokFile, []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if got, err := fn(context.Background()); err != nil || got != tok {
			t.Fatalf("token %q, %v; want %q", got, err, tok)
		}
	}
	if _, err := ClientOpts(config.Kafka{SASL: &config.KafkaSASL{Mechanism: "OAUTHBEARER", TokenFile: tokFile}}, nil); err != nil {
		t.Fatal(err)
	}
}

// selfSignedTLS makes a CA-less self-signed certificate for 127.0.0.1 and
// returns the PEM file a client trusts and the server's config.
func selfSignedTLS(t *testing.T) (string, *tls.Config) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	kb, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, certPEM, 0o600); err != nil {
		t.Fatal(err)
	}
	return caFile, &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}
}
