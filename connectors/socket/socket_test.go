package socket

import (
	"context"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/eddy-stream/eddy/connectors/internal/conntest"
	"github.com/eddy-stream/eddy/pipeline"
)

// server listens on 127.0.0.1:0 and hands each accepted connection to serve.
func server(t *testing.T, serve ...func(net.Conn)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for _, s := range serve {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s(c)
		}
	}()
	return ln.Addr().String()
}

// send writes text and closes the connection.
func send(text string) func(net.Conn) {
	return func(c net.Conn) {
		_, _ = c.Write([]byte(text))
		_ = c.Close()
	}
}

func loadSocket(t *testing.T, body string) *Config {
	t.Helper()
	cfg, err := conntest.LoadSource(t, "socket", body)
	require.NoError(t, err)
	return cfg.(*Config)
}

func TestSocketFormats(t *testing.T) {
	tests := []struct {
		name string
		keys string
		sent string
		want []map[string]any
	}{
		{"text by default", "", "hello\r\n\nworld", []map[string]any{{"line": "hello"}, {"line": ""}, {"line": "world"}}},
		{"json", "format: json", "{\"a\":1}\n{\"a\":2}\n", []map[string]any{{"a": int64(1)}, {"a": int64(2)}}},
		{"csv", "format: csv", "a,b\n1,2\n", []map[string]any{{"a": "1", "b": "2"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			addr := server(t, send(tt.sent))
			cfg := loadSocket(t, "address: "+addr+"\n"+tt.keys)
			batches := conntest.Drain(t, conntest.OpenSource(t, cfg, 0, 1, nil), 5*time.Second)
			require.Equal(t, tt.want, conntest.Fields(batches))
			require.Nil(t, conntest.LastPosition(batches))
		})
	}
}

func TestSocketReadHonoursContextAndClose(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	addr := server(t, func(c net.Conn) {
		_, _ = c.Write([]byte("first\n"))
		<-hold
		_ = c.Close()
	})
	src := conntest.OpenSource(t, loadSocket(t, "address: "+addr), 0, 1, nil)
	b := conntest.ReadOnce(t, src, 5*time.Second)
	require.NoError(t, b.Err)
	require.Equal(t, []map[string]any{{"line": "first"}}, conntest.Fields([]conntest.Batch{b}))

	start := time.Now()
	b = conntest.ReadOnce(t, src, 30*time.Millisecond)
	require.ErrorIs(t, b.Err, context.DeadlineExceeded)
	require.Less(t, time.Since(start), 2*time.Second)
	require.NoError(t, src.Close(context.Background()))
	require.NoError(t, src.Close(context.Background()), "Close twice is harmless")
}

func TestSocketReconnect(t *testing.T) {
	addr := server(t, send("a\n"), send("b\n"))
	cfg := loadSocket(t, "address: "+addr+"\nreconnect: true\nreconnect_delay: 5ms")
	require.False(t, cfg.Bounded())
	src := conntest.OpenSource(t, cfg, 0, 1, nil)
	var got []map[string]any
	for len(got) < 2 {
		b := conntest.ReadOnce(t, src, 5*time.Second)
		require.NoError(t, b.Err)
		got = append(got, conntest.Fields([]conntest.Batch{b})...)
	}
	require.Equal(t, []map[string]any{{"line": "a"}, {"line": "b"}}, got)
	// The server is gone: Read keeps trying until its context is done.
	require.ErrorIs(t, conntest.ReadOnce(t, src, 50*time.Millisecond).Err, context.DeadlineExceeded)
}

func TestSocketDecodeErrorIsNotAReconnect(t *testing.T) {
	hold := make(chan struct{})
	t.Cleanup(func() { close(hold) })
	addr := server(t, func(c net.Conn) {
		_, _ = c.Write([]byte("{\"a\":1}\nbad\n"))
		<-hold
		_ = c.Close()
	}, send("{\"a\":2}\n"))
	cfg := loadSocket(t, "address: "+addr+"\nformat: json\nreconnect: true\nreconnect_delay: 5ms")
	src := conntest.OpenSource(t, cfg, 0, 1, nil)
	var batches []conntest.Batch
	for len(conntest.Failures(batches)) == 0 {
		b := conntest.ReadOnce(t, src, 5*time.Second)
		require.NoError(t, b.Err)
		require.True(t, len(b.Records) > 0 || len(b.Failed) > 0)
		batches = append(batches, b)
	}
	require.Equal(t, []map[string]any{{"a": int64(1)}}, conntest.Fields(batches))
	require.Equal(t, []conntest.Failure{{Fields: map[string]any{"raw": "bad"},
		Err: "socket " + addr + `:2: invalid JSON: a line must be a JSON object, not "bad"`}}, conntest.Failures(batches))
	// The connection stays: nothing more arrives until the server sends it.
	require.ErrorIs(t, conntest.ReadOnce(t, src, 50*time.Millisecond).Err, context.DeadlineExceeded)
}

func TestSocketConnectError(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now

	src, err := loadSocket(t, "address: "+addr).NewSource()
	require.NoError(t, err)
	err = src.Open(context.Background(), &pipeline.SourceContext{SubtaskInfo: conntest.Info("in", 0, 1)})
	require.ErrorContains(t, err, `socket source "in": dial tcp `+addr)

	// With reconnect, Open succeeds and Read waits for the server.
	src = conntest.OpenSource(t, loadSocket(t, "address: "+addr+"\nreconnect: true\nreconnect_delay: 5ms"), 0, 1, nil)
	require.ErrorIs(t, conntest.ReadOnce(t, src, 50*time.Millisecond).Err, context.DeadlineExceeded)
}

func TestSocketEOF(t *testing.T) {
	addr := server(t, send(""))
	src := conntest.OpenSource(t, loadSocket(t, "address: "+addr), 0, 1, nil)
	require.ErrorIs(t, conntest.ReadOnce(t, src, 5*time.Second).Err, io.EOF)
}

func TestSocketLoad(t *testing.T) {
	tests := []struct {
		body    string
		wantErr string
	}{
		{body: "address: localhost:9000"},
		{body: "address: '[::1]:9000'\nformat: json\nreconnect: true\nconnect_timeout: 1s\nreconnect_delay: 100ms"},
		{body: "format: text", wantErr: `missing required key "address"`},
		{body: "address: localhost", wantErr: `address: must be host:port, as in localhost:9000, not "localhost"`},
		{body: "address: 'localhost:'", wantErr: "address: must be host:port"},
		{body: "address: x:1\nconnect_timeout: 0", wantErr: "connect_timeout: must be positive"},
		{body: "address: x:1\nparallelism: 2", wantErr: "a socket source runs with parallelism at most 1"},
	}
	for _, tt := range tests {
		t.Run(tt.body, func(t *testing.T) {
			cfg, err := conntest.LoadSource(t, "socket", tt.body)
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
				return
			}
			require.NoError(t, err)
			c := cfg.(*Config)
			require.Equal(t, 1, c.MaxParallelism())
			require.Equal(t, pipeline.AtMostOnce, c.Guarantee())
			require.Equal(t, !c.Reconnect, c.Bounded())
		})
	}
}
