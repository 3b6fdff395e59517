package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"
)

// Client contexts: named sets of the connection flags (--url and the
// credential flags), kept in a file so that a user does not repeat them,
// like `nats context` or Pulsar's client.conf:
//
//	meridian context save prod --url broker.example:6650 --tls-ca ca.pem --token-file prod.token
//	meridian context select prod
//	meridian admin topics list public/default      # uses prod's flags
//	meridian --context dev produce ...             # another one, once
//
// The file is $MERIDIAN_CONTEXTS, or contexts.yaml in the user's config
// directory (~/.config/meridian/contexts.yaml), written mode 0600 (a
// context may hold a token). A flag given on the command line wins over
// the context's.

// cliContext is one named context: the values of the flags it sets.
type cliContext struct {
	URL       string `yaml:"url,omitempty"`
	Token     string `yaml:"token,omitempty"`
	TokenFile string `yaml:"token_file,omitempty"`
	TLSCA     string `yaml:"tls_ca,omitempty"`
	TLSCert   string `yaml:"tls_cert,omitempty"`
	TLSKey    string `yaml:"tls_key,omitempty"`
}

// flags returns the context's values by flag name (set ones only).
func (c cliContext) flags() map[string]string {
	m := map[string]string{}
	for name, v := range map[string]string{"url": c.URL, "token": c.Token, "token-file": c.TokenFile,
		"tls-ca": c.TLSCA, "tls-cert": c.TLSCert, "tls-key": c.TLSKey} {
		if v != "" {
			m[name] = v
		}
	}
	return m
}

// contextFile is the file's content.
type contextFile struct {
	Current  string                `yaml:"current,omitempty"`
	Contexts map[string]cliContext `yaml:"contexts"`
}

// maxContextFileBytes bounds the file read (it is small; anything bigger
// is not ours).
const maxContextFileBytes = 1 << 20

// contextsPath returns the contexts file's path.
func contextsPath() (string, error) {
	if p := os.Getenv("MERIDIAN_CONTEXTS"); p != "" {
		return p, nil
	}
	dir, err := os.UserConfigDir()
	if err != nil {
		return "", fmt.Errorf("contexts file: %w (set MERIDIAN_CONTEXTS)", err)
	}
	return filepath.Join(dir, "meridian", "contexts.yaml"), nil
}

// loadContexts reads the contexts file (empty when it does not exist).
func loadContexts() (contextFile, string, error) {
	cf := contextFile{Contexts: map[string]cliContext{}}
	path, err := contextsPath()
	if err != nil {
		return cf, "", err
	}
	st, err := os.Stat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return cf, path, nil
	}
	if err != nil {
		return cf, path, err
	}
	if st.Size() > maxContextFileBytes {
		return cf, path, fmt.Errorf("contexts file %s is %d bytes, limit %d", path, st.Size(), maxContextFileBytes)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return cf, path, err
	}
	if err := yaml.Unmarshal(b, &cf); err != nil {
		return cf, path, fmt.Errorf("contexts file %s: %w", path, err)
	}
	if cf.Contexts == nil {
		cf.Contexts = map[string]cliContext{}
	}
	return cf, path, nil
}

// save writes the contexts file, mode 0600 (its directory 0700).
func (cf contextFile) save(path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	b, err := yaml.Marshal(cf)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, b, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// serverCommands are the commands that run servers and keep data: their
// files are private (privateFiles).
var serverCommands = map[string]bool{"standalone": true, "dev": true, "broker": true, "bookie": true, "meta": true}

// contextName is the --context flag.
var contextName string

func init() {
	// Every level's PersistentPreRunE runs (the root's applies the
	// context before a subcommand's checks).
	cobra.EnableTraverseRunHooks = true
	rootCmd.PersistentFlags().StringVar(&contextName, "context", "", "use this client context's flags (meridian context ls); default: $MERIDIAN_CONTEXT or the selected one")
	rootCmd.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error {
		if serverCommands[cmd.Name()] && cmd.Parent() == rootCmd {
			privateFiles()
		}
		if err := applyContext(cmd); err != nil {
			return err
		}
		applyDevCluster(cmd)
		return nil
	}
	rootCmd.AddCommand(newContextCmd())
}

// applyContext sets, on cmd, the flags of the chosen context that the
// command has and that the command line did not give. Without a chosen
// context (and no file) it does nothing.
func applyContext(cmd *cobra.Command) error {
	if cmd.Parent() != nil && cmd.Parent().Name() == "context" || cmd.Name() == "context" {
		return nil // the context commands manage the file themselves
	}
	name := contextName
	if name == "" {
		name = os.Getenv("MERIDIAN_CONTEXT")
	}
	cf, path, err := loadContexts()
	if err != nil {
		if name == "" {
			return nil // no context asked for: a broken file does not stop the tools
		}
		return err
	}
	if name == "" {
		name = cf.Current
	}
	if name == "" {
		return nil
	}
	c, ok := cf.Contexts[name]
	if !ok {
		return fmt.Errorf("--context %s: no such context in %s (meridian context ls)", name, path)
	}
	for flag, v := range c.flags() {
		f := cmd.Flags().Lookup(flag)
		if f == nil || f.Changed {
			continue
		}
		if err := cmd.Flags().Set(flag, v); err != nil {
			return fmt.Errorf("context %s: %s: %w", name, flag, err)
		}
	}
	return nil
}

// loadContext reads the contexts file and the context name in it.
func loadContext(name string) (contextFile, string, cliContext, error) {
	cf, path, err := loadContexts()
	if err != nil {
		return cf, path, cliContext{}, err
	}
	c, ok := cf.Contexts[name]
	if !ok {
		return cf, path, c, fmt.Errorf("no context %q in %s (meridian context ls)", name, path)
	}
	return cf, path, c, nil
}

func newContextCmd() *cobra.Command {
	ctxCmd := &cobra.Command{
		Use:   "context",
		Short: "named sets of connection flags (--url, --token-file, --tls-ca, ...), kept in a file",
		Long: `context saves the connection flags under a name so that a user does not
repeat them; the selected context applies to every command (a flag on the
command line wins). The file is $MERIDIAN_CONTEXTS or
~/.config/meridian/contexts.yaml (mode 0600).`,
	}
	var url string
	save := &cobra.Command{
		Use:   "save NAME",
		Short: "save (or replace) a context from --url and the credential flags; the first one saved is selected",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := validContextName(args[0]); err != nil {
				return err
			}
			if _, err := cliTLSFiles(); err != nil {
				return err
			}
			c := cliContext{URL: url, Token: cliSecurity.token, TokenFile: absIf(cliSecurity.tokenFile),
				TLSCA: absIf(cliSecurity.tlsCA), TLSCert: absIf(cliSecurity.tlsCert), TLSKey: absIf(cliSecurity.key)}
			if len(c.flags()) == 0 {
				return fmt.Errorf("context %s: give --url and/or credential flags to save", args[0])
			}
			cf, path, err := loadContexts()
			if err != nil {
				return err
			}
			cf.Contexts[args[0]] = c
			if cf.Current == "" {
				cf.Current = args[0]
			}
			if err := cf.save(path); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "context %s saved in %s\n", args[0], path)
			return nil
		},
	}
	save.Flags().StringVar(&url, "url", "", "broker gRPC address (host:port)")
	sel := &cobra.Command{
		Use:   "select NAME",
		Short: "make NAME the context every command uses",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cf, path, _, err := loadContext(args[0])
			if err != nil {
				return err
			}
			cf.Current = args[0]
			return cf.save(path)
		},
	}
	ls := &cobra.Command{
		Use:   "ls",
		Short: "list the contexts (* = selected)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cf, _, err := loadContexts()
			if err != nil {
				return err
			}
			names := make([]string, 0, len(cf.Contexts))
			for n := range cf.Contexts {
				names = append(names, n)
			}
			slices.Sort(names)
			for _, n := range names {
				mark := " "
				if n == cf.Current {
					mark = "*"
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%s %s\t%s\n", mark, n, cf.Contexts[n].URL)
			}
			return nil
		},
	}
	show := &cobra.Command{
		Use:   "show [NAME]",
		Short: "print a context's flags (the token itself is not printed)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := ""
			if len(args) == 1 {
				name = args[0]
			} else {
				cf, _, err := loadContexts()
				if err != nil {
					return err
				}
				name = cf.Current
			}
			_, path, c, err := loadContext(name)
			if err != nil {
				return err
			}
			fl := c.flags()
			if _, ok := fl["token"]; ok {
				fl["token"] = "(set)"
			}
			keys := make([]string, 0, len(fl))
			for k := range fl {
				keys = append(keys, k)
			}
			slices.Sort(keys)
			fmt.Fprintf(cmd.OutOrStdout(), "context %s (%s)\n", name, path)
			for _, k := range keys {
				fmt.Fprintf(cmd.OutOrStdout(), "  --%s %s\n", k, fl[k])
			}
			return nil
		},
	}
	rm := &cobra.Command{
		Use:   "rm NAME",
		Short: "delete a context",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cf, path, _, err := loadContext(args[0])
			if err != nil {
				return err
			}
			delete(cf.Contexts, args[0])
			if cf.Current == args[0] {
				cf.Current = ""
			}
			return cf.save(path)
		},
	}
	ctxCmd.AddCommand(save, sel, ls, show, rm)
	return ctxCmd
}

// validContextName refuses names that would not survive the file or a
// shell: 1 to 64 of letters, digits, '.', '_' and '-'.
func validContextName(n string) error {
	if n == "" || len(n) > 64 || strings.IndexFunc(n, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '.' || r == '_' || r == '-')
	}) >= 0 {
		return fmt.Errorf("context name %q: 1 to 64 letters, digits, '.', '_' or '-'", n)
	}
	return nil
}

// absIf makes a file flag absolute, so the context works from any
// directory.
func absIf(p string) string {
	if p == "" {
		return ""
	}
	if a, err := filepath.Abs(p); err == nil {
		return a
	}
	return p
}
