package main

import (
	"fmt"

	"github.com/meridianmq/meridian/client"
	"github.com/meridianmq/meridian/security"
)

// cliSecurity holds the persistent credential flags every tool command
// takes (produce, consume, admin, perf, ...).
var cliSecurity struct {
	token, tokenFile    string
	tlsCA, tlsCert, key string
}

func init() {
	pf := rootCmd.PersistentFlags()
	pf.StringVar(&cliSecurity.token, "token", "", "JWT presented to brokers (Authorization: Bearer; requires --tls-ca)")
	pf.StringVar(&cliSecurity.tokenFile, "token-file", "", "file holding the JWT (re-read when it changes; requires --tls-ca)")
	pf.StringVar(&cliSecurity.tlsCA, "tls-ca", "", "CA bundle (PEM) the brokers' certificates chain to: connect with TLS")
	pf.StringVar(&cliSecurity.tlsCert, "tls-cert", "", "client certificate (PEM) for mutual TLS (its CN is the role)")
	pf.StringVar(&cliSecurity.key, "tls-key", "", "private key (PEM) of --tls-cert")
}

// cliTLSFiles returns the TLS files of the flags, checked.
func cliTLSFiles() (security.TLSFiles, error) {
	f := security.TLSFiles{CAFile: cliSecurity.tlsCA, CertFile: cliSecurity.tlsCert, KeyFile: cliSecurity.key}
	if f.IsZero() {
		if cliSecurity.token != "" || cliSecurity.tokenFile != "" {
			return f, fmt.Errorf("--token and --token-file require --tls-ca (a token never crosses the network in clear)")
		}
		return f, nil
	}
	switch {
	case f.CAFile == "":
		return f, fmt.Errorf("--tls-cert/--tls-key require --tls-ca")
	case (f.CertFile == "") != (f.KeyFile == ""):
		return f, fmt.Errorf("--tls-cert and --tls-key go together")
	}
	if cliSecurity.token != "" && cliSecurity.tokenFile != "" {
		return f, fmt.Errorf("--token and --token-file are exclusive")
	}
	return f, nil
}

// withCLISecurity adds the credential flags to client options.
func withCLISecurity(o client.Options) (client.Options, error) {
	f, err := cliTLSFiles()
	if err != nil {
		return o, err
	}
	o.TLSFiles, o.Token, o.TokenFile = f, cliSecurity.token, cliSecurity.tokenFile
	return o, nil
}

// cliRuntime is the credential flags as a security runtime (plaintext
// without --tls-ca), for the tools that dial gRPC or HTTP themselves.
// Close it when done.
func cliRuntime() (*security.Runtime, error) {
	f, err := cliTLSFiles()
	if err != nil {
		return nil, err
	}
	var tok security.TokenSource
	switch {
	case cliSecurity.token != "":
		tok = security.StaticToken(cliSecurity.token)
	case cliSecurity.tokenFile != "":
		tok = security.TokenFromFile(cliSecurity.tokenFile)
	}
	rt, err := security.ClientRuntime(f, tok, nil)
	if err != nil {
		return nil, fmt.Errorf("--tls-ca/--tls-cert/--tls-key: %w", err)
	}
	return rt, nil
}
