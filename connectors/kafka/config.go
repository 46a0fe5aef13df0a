package kafka

import (
	"crypto/sha256"
	"crypto/sha512"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/IBM/sarama"
	"github.com/xdg-go/scram"

	"github.com/eddy-stream/eddy/pipeline"
)

// DefaultKafkaVersion is the protocol version eddy speaks unless
// kafka_version says otherwise: new enough for transactions, read_committed
// and DescribeTransactions, old enough for every broker of the last years.
const DefaultKafkaVersion = "3.6.0"

// ClientConfig holds the connection settings shared by the source and the
// sink: brokers, client id, protocol version, TLS and SASL. Both embed it
// inline, so its keys sit beside the component's own.
type ClientConfig struct {
	// Brokers are the bootstrap brokers, host:port: a list, or one string
	// of comma-separated brokers.
	Brokers pipeline.StringList `yaml:"brokers" eddy:"required"`
	// ClientID names eddy in the brokers' logs and quotas.
	ClientID string `yaml:"client_id"`
	// KafkaVersion is the protocol version to speak, e.g. "3.6.0".
	KafkaVersion string `yaml:"kafka_version"`
	// TLS encrypts the connections when enabled.
	TLS TLSConfig `yaml:"tls"`
	// SASL authenticates the connections.
	SASL SASLConfig `yaml:"sasl"`
	// DialTimeout bounds connecting to a broker.
	DialTimeout pipeline.Duration `yaml:"dial_timeout"`
}

// TLSConfig is the `tls` block.
type TLSConfig struct {
	Enabled bool `yaml:"enabled"`
	// CAFile is a PEM file of the CAs to trust; default: the system's.
	CAFile string `yaml:"ca_file"`
	// CertFile and KeyFile are a PEM client certificate and key (mTLS).
	CertFile string `yaml:"cert_file"`
	KeyFile  string `yaml:"key_file"`
	// ServerName overrides the name checked against the broker certificate.
	ServerName string `yaml:"server_name"`
	// SkipVerify disables certificate verification: for tests only.
	SkipVerify bool `yaml:"skip_verify"`
}

// SASLConfig is the `sasl` block.
type SASLConfig struct {
	// Mechanism is PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512; empty = no SASL.
	Mechanism string `yaml:"mechanism"`
	User      string `yaml:"user"`
	Password  string `yaml:"password"`
}

func defaultClientConfig() ClientConfig {
	return ClientConfig{
		ClientID:     "eddy",
		KafkaVersion: DefaultKafkaVersion,
		DialTimeout:  pipeline.Duration(10 * time.Second),
	}
}

// Validate checks the connection keys.
func (c *ClientConfig) Validate() error {
	var errs []error
	// "a:9092,b:9092" (one string, e.g. from ${KAFKA_BROKERS}) is a list.
	var brokers pipeline.StringList
	for _, b := range c.Brokers {
		for part := range strings.SplitSeq(b, ",") {
			if part = strings.TrimSpace(part); part != "" {
				brokers = append(brokers, part)
			}
		}
	}
	c.Brokers = brokers
	if len(c.Brokers) == 0 {
		errs = append(errs, pipeline.FieldErr("brokers", "must list at least one broker, e.g. [localhost:9092]"))
	}
	for _, b := range c.Brokers {
		if !strings.Contains(b, ":") {
			errs = append(errs, pipeline.FieldErr("brokers", "broker %q must be host:port", b))
		}
	}
	if _, err := sarama.ParseKafkaVersion(c.KafkaVersion); err != nil {
		errs = append(errs, pipeline.FieldErr("kafka_version", "%q is not a Kafka version like 3.6.0", c.KafkaVersion))
	}
	if c.DialTimeout <= 0 {
		errs = append(errs, pipeline.FieldErr("dial_timeout", "must be positive"))
	}
	if (c.TLS.CertFile == "") != (c.TLS.KeyFile == "") {
		errs = append(errs, pipeline.FieldErr("tls", "cert_file and key_file go together"))
	}
	switch strings.ToUpper(c.SASL.Mechanism) {
	case "":
	case sarama.SASLTypePlaintext, sarama.SASLTypeSCRAMSHA256, sarama.SASLTypeSCRAMSHA512:
		if c.SASL.User == "" {
			errs = append(errs, pipeline.FieldErr("sasl", "mechanism %s needs a user", c.SASL.Mechanism))
		}
	default:
		errs = append(errs, pipeline.FieldErr("sasl", "mechanism %q: use PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", c.SASL.Mechanism))
	}
	return errors.Join(errs...)
}

// saramaConfig returns a sarama configuration with the connection settings;
// the source and the sink add their own.
func (c *ClientConfig) saramaConfig() (*sarama.Config, error) {
	sc := sarama.NewConfig()
	v, err := sarama.ParseKafkaVersion(c.KafkaVersion)
	if err != nil {
		return nil, err
	}
	sc.Version = v
	sc.ClientID = c.ClientID
	sc.Net.DialTimeout = c.DialTimeout.D()
	sc.Metadata.Retry.Max = 5
	sc.Metadata.Retry.Backoff = 200 * time.Millisecond
	if c.TLS.Enabled {
		tc, err := c.TLS.config()
		if err != nil {
			return nil, err
		}
		sc.Net.TLS.Enable = true
		sc.Net.TLS.Config = tc
	}
	if m := strings.ToUpper(c.SASL.Mechanism); m != "" {
		sc.Net.SASL.Enable = true
		sc.Net.SASL.Mechanism = sarama.SASLMechanism(m)
		sc.Net.SASL.User = c.SASL.User
		sc.Net.SASL.Password = c.SASL.Password
		sc.Net.SASL.Handshake = true
		switch m {
		case sarama.SASLTypeSCRAMSHA256:
			sc.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.HashGeneratorFcn(sha256.New)} }
		case sarama.SASLTypeSCRAMSHA512:
			sc.Net.SASL.SCRAMClientGeneratorFunc = func() sarama.SCRAMClient { return &scramClient{hash: scram.HashGeneratorFcn(sha512.New)} }
		}
	}
	return sc, nil
}

func (t *TLSConfig) config() (*tls.Config, error) {
	tc := &tls.Config{ServerName: t.ServerName, InsecureSkipVerify: t.SkipVerify, MinVersion: tls.VersionTLS12} //nolint:gosec // skip_verify is the user's explicit choice
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("tls ca_file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("tls ca_file %s: no PEM certificate in it", t.CAFile)
		}
		tc.RootCAs = pool
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("tls cert_file/key_file: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

// scramClient adapts xdg-go/scram to sarama.SCRAMClient.
type scramClient struct {
	hash scram.HashGeneratorFcn
	conv *scram.ClientConversation
}

func (s *scramClient) Begin(user, password, authzID string) error {
	c, err := s.hash.NewClient(user, password, authzID)
	if err != nil {
		return err
	}
	s.conv = c.NewConversation()
	return nil
}

func (s *scramClient) Step(challenge string) (string, error) { return s.conv.Step(challenge) }
func (s *scramClient) Done() bool                            { return s.conv.Done() }

// newClient connects to the cluster: the startup check that the brokers are
// reachable, with an error that says what to check.
func (c *ClientConfig) newClient(sc *sarama.Config) (sarama.Client, error) {
	cl, err := sarama.NewClient(c.Brokers, sc)
	if err != nil {
		return nil, fmt.Errorf("connect to kafka brokers %s: %w (check `brokers`, that the broker is running and reachable, and tls/sasl)",
			strings.Join(c.Brokers, ","), err)
	}
	return cl, nil
}
