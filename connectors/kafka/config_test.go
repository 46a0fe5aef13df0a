package kafka

import (
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
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/eddy-stream/eddy/pipeline"
)

// connect builds the client of cfg and lists the partitions of topic.
func connect(t *testing.T, cfg ClientConfig, topic string) error {
	t.Helper()
	require.NoError(t, cfg.Validate())
	sc, err := cfg.saramaConfig()
	require.NoError(t, err)
	client, err := cfg.newClient(sc)
	if err != nil {
		return err
	}
	defer client.Close()
	parts, err := client.Partitions(topic)
	if err != nil {
		return err
	}
	require.Len(t, parts, 2)
	return nil
}

// SASL PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512 authenticate against a
// broker that requires SASL; a wrong password is refused with a message
// that names the brokers.
func TestClientSASL(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "plain-user", "plain-pass"),
		kfake.Superuser("SCRAM-SHA-256", "scram256", "pass-256"),
		kfake.Superuser("SCRAM-SHA-512", "scram512", "pass-512"),
		kfake.SeedTopics(2, "t"))
	require.NoError(t, err)
	defer c.Close()
	for _, tc := range []struct{ mech, user, pass string }{
		{"PLAIN", "plain-user", "plain-pass"},
		{"SCRAM-SHA-256", "scram256", "pass-256"},
		{"scram-sha-512", "scram512", "pass-512"},
	} {
		cfg := defaultClientConfig()
		cfg.Brokers = c.ListenAddrs()
		cfg.SASL = SASLConfig{Mechanism: tc.mech, User: tc.user, Password: tc.pass}
		require.NoError(t, connect(t, cfg, "t"), tc.mech)

		cfg.SASL.Password = "wrong"
		err := connect(t, cfg, "t")
		require.Error(t, err, tc.mech)
		require.ErrorContains(t, err, "connect to kafka brokers")
	}
}

// TLS with the broker's CA in ca_file connects; without it the
// certificate is refused.
func TestClientTLS(t *testing.T) {
	dir := t.TempDir()
	serverTLS, caFile := selfSigned(t, dir)
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.TLS(serverTLS), kfake.SeedTopics(2, "t"))
	require.NoError(t, err)
	defer c.Close()

	cfg := defaultClientConfig()
	cfg.Brokers = c.ListenAddrs()
	cfg.TLS = TLSConfig{Enabled: true, CAFile: caFile}
	require.NoError(t, connect(t, cfg, "t"))

	cfg.TLS.CAFile = ""
	cfg.DialTimeout = pipeline.Duration(2 * time.Second)
	require.Error(t, connect(t, cfg, "t"), "a certificate of an unknown CA must be refused")
}

// A comma-separated brokers string (one ${KAFKA_BROKERS}) is a list.
func TestClientBrokersList(t *testing.T) {
	cfg := defaultClientConfig()
	cfg.Brokers = pipeline.StringList{"a:9092, b:9093", "c:9094"}
	require.NoError(t, cfg.Validate())
	require.Equal(t, pipeline.StringList{"a:9092", "b:9093", "c:9094"}, cfg.Brokers)

	cfg.Brokers = pipeline.StringList{"no-port"}
	require.ErrorContains(t, cfg.Validate(), `broker "no-port" must be host:port`)
}

// selfSigned writes a CA certificate for 127.0.0.1 and returns the
// server's TLS config and the CA file.
func selfSigned(t *testing.T, dir string) (*tls.Config, string) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "eddy test broker"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:         true, BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	caFile := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600))
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}, caFile
}
