// Package socket provides the `socket` source: lines read from a TCP
// server, like Flink's socketTextStream (try it with `nc -lk 9000`).
//
// It imports pipeline and connectors/codec only.
package socket

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"time"

	"github.com/eddy-stream/eddy/connectors/codec"
	"github.com/eddy-stream/eddy/pipeline"
)

func init() {
	pipeline.Default.RegisterSource(pipeline.SourcePlugin{
		Type:    "socket",
		Summary: "reads text, JSON or CSV lines from a TCP server (like Flink's socketTextStream)",
		New: func() pipeline.SourceConfig {
			return &Config{
				DecodeOptions:  codec.DefaultDecodeOptions(codec.Text),
				ConnectTimeout: pipeline.Duration(10 * time.Second),
				ReconnectDelay: pipeline.Duration(time.Second),
			}
		},
	})
}

// Config is the `socket` source's configuration.
type Config struct {
	// Address is the server's host:port.
	Address string `yaml:"address" eddy:"required"`
	// format (default text) and csv_delimiter. Lines that do not decode
	// go to the source's on_error.
	codec.DecodeOptions `yaml:",inline"`
	// Reconnect connects again when the server closes the connection or
	// cannot be reached, instead of ending the input; the input then never
	// ends.
	Reconnect bool `yaml:"reconnect"`
	// ConnectTimeout bounds one connection attempt.
	ConnectTimeout pipeline.Duration `yaml:"connect_timeout"`
	// ReconnectDelay is the pause between connection attempts with reconnect.
	ReconnectDelay pipeline.Duration `yaml:"reconnect_delay"`
}

// Validate checks the keys.
func (c *Config) Validate() error {
	var errs []error
	if _, port, err := net.SplitHostPort(c.Address); err != nil || port == "" {
		errs = append(errs, pipeline.FieldErr("address", "must be host:port, as in localhost:9000, not %q", c.Address))
	}
	if err := c.DecodeOptions.Validate(); err != nil {
		errs = append(errs, err)
	}
	if c.ConnectTimeout <= 0 {
		errs = append(errs, pipeline.FieldErr("connect_timeout", "must be positive"))
	}
	if c.Reconnect && c.ReconnectDelay <= 0 {
		errs = append(errs, pipeline.FieldErr("reconnect_delay", "must be positive with reconnect: true"))
	}
	return errors.Join(errs...)
}

// MaxParallelism is 1: one connection.
func (c *Config) MaxParallelism() int { return 1 }

// Bounded is true unless reconnect is set: the input ends when the server
// closes the connection.
func (c *Config) Bounded() bool { return !c.Reconnect }

// Guarantee is at-most-once: what the server sent cannot be replayed.
func (c *Config) Guarantee() pipeline.Guarantee { return pipeline.AtMostOnce }

// NewSource returns the source.
func (c *Config) NewSource() (pipeline.Source, error) { return &source{cfg: c}, nil }

type source struct {
	cfg    *Config
	id     string
	logger *slog.Logger
	conn   net.Conn
	lines  *codec.AsyncLines
	stream *codec.Stream
}

// Open connects. Without reconnect a server that cannot be reached fails
// the run; with reconnect Read keeps trying.
func (s *source) Open(ctx context.Context, sc *pipeline.SourceContext) error {
	s.id, s.logger = sc.ID, sc.Logger
	if s.logger == nil {
		s.logger = slog.Default()
	}
	s.stream = codec.NewStream("socket "+s.cfg.Address, nil, &s.cfg.DecodeOptions, sc)
	err := s.connect(ctx)
	if err != nil && s.cfg.Reconnect {
		s.logger.Warn("cannot connect yet; retrying", "source", s.id, "address", s.cfg.Address, "error", err)
		return nil
	}
	return err
}

func (s *source) connect(ctx context.Context) error {
	d := net.Dialer{Timeout: s.cfg.ConnectTimeout.D()}
	conn, err := d.DialContext(ctx, "tcp", s.cfg.Address)
	if err != nil {
		return fmt.Errorf("socket source %q: %w", s.id, err)
	}
	s.conn = conn
	s.lines = codec.StartLines(conn, s.cfg.Format == codec.CSV)
	s.stream.Reset(s.lines, &s.cfg.DecodeOptions)
	return nil
}

// disconnect closes the connection and stops its reader.
func (s *source) disconnect() error {
	if s.conn == nil {
		return nil
	}
	s.lines.Stop()
	err := s.conn.Close()
	s.conn, s.lines = nil, nil
	return err
}

// Read appends the records of the next lines, and the lines that do not
// decode to b.Failed ("socket HOST:PORT:LINE: reason", {"raw": line}); a
// line that does not decode never ends the connection. It returns io.EOF
// when the server closed the connection (unless reconnect is set) and
// ctx.Err() as soon as ctx is done.
func (s *source) Read(ctx context.Context, b *pipeline.ReadBatch) error {
	for {
		if s.conn == nil {
			if err := s.wait(ctx); err != nil {
				return err
			}
			if err := s.connect(ctx); err != nil {
				s.logger.Debug("cannot connect; retrying", "source", s.id, "error", err)
				continue
			}
			s.logger.Info("connected", "source", s.id, "address", s.cfg.Address)
		}
		err := s.stream.Read(ctx, b)
		switch {
		case err == nil || ctx.Err() != nil:
			return err
		case !s.cfg.Reconnect && errors.Is(err, io.EOF):
			return io.EOF
		case !s.cfg.Reconnect:
			return fmt.Errorf("socket source %q: %w", s.id, err)
		}
		s.logger.Warn("connection ended; reconnecting", "source", s.id, "address", s.cfg.Address, "error", err)
		_ = s.disconnect()
	}
}

// wait sleeps for reconnect_delay or until ctx is done.
func (s *source) wait(ctx context.Context) error {
	t := time.NewTimer(s.cfg.ReconnectDelay.D())
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// Close closes the connection, which also ends a pending Read's reader.
func (s *source) Close(context.Context) error {
	if err := s.disconnect(); err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("socket source %q: %w", s.id, err)
	}
	return nil
}
