package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// healthOptions are the flags of `eddy health`.
type healthOptions struct {
	global  *globalOptions
	addr    string
	timeout time.Duration
}

// AddFlags adds --admin-addr (read as by `eddy run`: the flag, else
// EDDY_ADMIN_ADDR) and --timeout.
func (o *healthOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.addr, keyAdminAddr, "", "address of the run's admin endpoint (default: "+envName(keyAdminAddr)+"); an unspecified host (0.0.0.0, [::]) is probed on the loopback address")
	fs.DurationVar(&o.timeout, "timeout", 5*time.Second, "how long to wait for the answer")
}

func newHealthCommand(g *globalOptions) *cobra.Command {
	o := &healthOptions{global: g}
	c := &cobra.Command{
		Use:   "health",
		Short: "Ask a running eddy whether it is healthy (GET /healthz of its admin endpoint)",
		Long: `Health asks the admin endpoint of a running eddy for GET /healthz and
prints the run's state. It is the container image's HEALTHCHECK, which has
neither curl nor wget.

The address is --admin-addr, else EDDY_ADMIN_ADDR: in the container image
both eddy run and eddy health read EDDY_ADMIN_ADDR=0.0.0.0:9249. A run on
port 0 (the default outside containers) has a port chosen at start, which
its log gives: pass it with --admin-addr.

Exit codes: 0 the run is running or stopping, 1 it is starting, restarting,
or does not answer, 2 invalid input (no usable address).`,
		Args: exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, _ []string) error {
			return o.run(c)
		},
	}
	o.AddFlags(c.Flags())
	return c
}

// probeAddr returns the HOST:PORT to probe for the setting addr.
func probeAddr(addr string) (string, error) {
	if !adminEnabled(addr) {
		return "", invalidInput("the admin endpoint is off (%q): eddy health needs --%s HOST:PORT", addr, keyAdminAddr)
	}
	host, port, err := net.SplitHostPort(strings.TrimSpace(addr))
	if err != nil {
		return "", invalidInput("--%s %q: want HOST:PORT (%v)", keyAdminAddr, addr, err)
	}
	switch n, err := strconv.ParseUint(port, 10, 16); {
	case err != nil:
		return "", invalidInput("--%s %q: want HOST:PORT, the port a number", keyAdminAddr, addr)
	case n == 0:
		return "", invalidInput("--%s %q: the run chose its port when it started (its log says \"admin endpoint listening\"): give that address", keyAdminAddr, addr)
	}
	if ip := net.ParseIP(host); host == "" || ip != nil && ip.IsUnspecified() {
		host = "127.0.0.1"
		if ip != nil && ip.To4() == nil {
			host = "::1"
		}
	}
	return net.JoinHostPort(host, port), nil
}

func (o *healthOptions) run(c *cobra.Command) error {
	addr := o.addr
	if f := c.Flags().Lookup(keyAdminAddr); f == nil || !f.Changed {
		// run's flag is never set here: viper gives EDDY_ADMIN_ADDR, else
		// run's default.
		addr = o.global.v.GetString(keyAdminAddr)
	}
	target, err := probeAddr(addr)
	if err != nil {
		return err
	}
	if o.timeout <= 0 {
		return invalidInput("--timeout %s: want a positive duration", o.timeout)
	}
	ctx, cancel := context.WithTimeout(c.Context(), o.timeout)
	defer cancel()
	url := "http://" + target + "/healthz"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return invalidInput("GET %s: %v", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return runtimeFailure(fmt.Errorf("unhealthy: GET %s: %w", url, err))
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
	if err != nil {
		return runtimeFailure(fmt.Errorf("unhealthy: GET %s: read the answer: %w", url, err))
	}
	var h struct {
		Status string `json:"status"`
	}
	if json.Unmarshal(body, &h) != nil || h.Status == "" {
		return runtimeFailure(fmt.Errorf("unhealthy: GET %s: %s: not an eddy admin endpoint's answer: %q", url, resp.Status, strings.TrimSpace(string(body))))
	}
	if resp.StatusCode != http.StatusOK {
		return runtimeFailure(fmt.Errorf("unhealthy: the run is %s (GET %s: %s)", h.Status, url, resp.Status))
	}
	if _, err := fmt.Fprintln(c.OutOrStdout(), h.Status); err != nil {
		return runtimeFailure(err)
	}
	return nil
}
