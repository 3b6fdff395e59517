package security

import (
	"errors"
	"fmt"
	"time"
)

// ErrConfig marks an invalid security block.
var ErrConfig = errors.New("security: config")

// AuthConfig switches authentication on.
type AuthConfig struct {
	// Enabled refuses anonymous calls (Unauthenticated): every caller
	// presents a verified token or client certificate. Requires TLS, so
	// tokens never cross the network in clear.
	Enabled bool `yaml:"enabled"`
	// Keys verify tokens (required when Enabled: components authenticate
	// with their certificates, users usually with tokens).
	Keys TokenKeys `yaml:"keys"`
}

// Config is the `security:` block every component config embeds. The zero
// value is security off: plaintext, anonymous, as before this package.
type Config struct {
	// TLS is this component's TLS identity; with it every listener serves
	// TLS only and every dial uses TLS with this certificate (mutual TLS
	// between components). cert_file and key_file are required with it.
	TLS TLSFiles `yaml:"tls"`
	// Auth switches authentication on (see AuthConfig).
	Auth AuthConfig `yaml:"auth"`
	// TokenFile, when set, holds a token this component presents when it
	// dials (re-read when it changes); components normally authenticate
	// with their certificate instead.
	TokenFile string `yaml:"token_file"`
	// Superusers are roles allowed everything (used by the authorizer).
	Superusers []string `yaml:"superusers"`
	// Insecure lets a component listen on a non-loopback address without
	// TLS and auth (a warning is logged at every start).
	Insecure bool `yaml:"insecure"`
	// ReloadPollInterval is how often the TLS and key files are re-read when
	// no file-system event arrived (default 30s, at least 10ms).
	ReloadPollInterval time.Duration `yaml:"reload_poll_interval"`
}

// Enabled reports whether TLS is configured.
func (c Config) Enabled() bool { return !c.TLS.IsZero() }

// Off reports whether security is entirely off (no TLS, auth disabled).
func (c Config) Off() bool { return !c.Enabled() && !c.Auth.Enabled }

// Validate checks the block; errors name the field ("security.…").
func (c Config) Validate() error {
	if c.Enabled() {
		if err := c.TLS.Validate("security.tls"); err != nil {
			return err
		}
		if c.TLS.CertFile == "" {
			return fmt.Errorf("%w: security.tls.cert_file and security.tls.key_file are required: a component serves and dials with its certificate", ErrConfig)
		}
	}
	if c.Auth.Enabled {
		if !c.Enabled() {
			return fmt.Errorf("%w: security.auth.enabled requires security.tls (tokens would cross the network in clear)", ErrConfig)
		}
		if err := c.Auth.Keys.Validate("security.auth.keys"); err != nil {
			return err
		}
	} else if c.Auth.Keys != (TokenKeys{}) {
		return fmt.Errorf("%w: security.auth.keys is set but security.auth.enabled is false", ErrConfig)
	}
	if c.TokenFile != "" && !c.Enabled() {
		return fmt.Errorf("%w: security.token_file requires security.tls (the token would cross the network in clear)", ErrConfig)
	}
	if c.ReloadPollInterval != 0 && c.ReloadPollInterval < 10*time.Millisecond {
		return fmt.Errorf("%w: security.reload_poll_interval %v is below 10ms", ErrConfig, c.ReloadPollInterval)
	}
	for i, s := range c.Superusers {
		if s == "" {
			return fmt.Errorf("%w: security.superusers[%d] is empty", ErrConfig, i)
		}
	}
	return nil
}
