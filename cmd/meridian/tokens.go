package main

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/golang-jwt/jwt/v5"
	"github.com/spf13/cobra"

	"github.com/meridianmq/meridian/security"
)

// `meridian tokens`: the keys and JWTs of token authentication, in the
// shapes of `pulsar tokens` (create-secret-key, create-key-pair, create,
// show, validate). Keys and tokens written to files are mode 0600.

func init() { rootCmd.AddCommand(newTokensCmd()) }

func newTokensCmd() *cobra.Command {
	tokens := &cobra.Command{
		Use:   "tokens",
		Short: "create and inspect the keys and tokens (JWT) of token authentication",
		Long: `tokens makes the signing keys brokers verify tokens with, and the tokens
clients present (the role is the token's "sub" claim, as in Pulsar):

  meridian tokens create-secret-key --output secret.key          (HS256)
  meridian tokens create-key-pair --output-private-key priv.pem --output-public-key pub.pem   (RS256, ES256)
  meridian tokens create --secret-key secret.key --subject app1 --expiry 30d
  meridian tokens create --private-key priv.pem --subject admin
  meridian tokens show TOKEN
  meridian tokens validate --public-key pub.pem TOKEN

Brokers take the secret key or the public key in security.auth.keys
(secret_key_file / public_key_file); see docs/SECURITY.md.`,
	}
	tokens.AddCommand(newTokensSecretKeyCmd(), newTokensKeyPairCmd(), newTokensCreateCmd(), newTokensShowCmd(), newTokensValidateCmd())
	return tokens
}

// writeSecret writes b to path with mode 0600 (replacing the file), or to
// w when path is empty.
func writeSecret(w io.Writer, path string, b []byte) error {
	if path == "" {
		_, err := w.Write(b)
		return err
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		return err
	}
	// WriteFile keeps the mode of a file that existed.
	return os.Chmod(path, 0o600)
}

func newTokensSecretKeyCmd() *cobra.Command {
	var output string
	var b64 bool
	cmd := &cobra.Command{
		Use:   "create-secret-key",
		Short: "create a random HS256 secret key (32 bytes)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			key := security.GenerateSecretKey()
			if b64 || output == "" {
				key = []byte(base64.StdEncoding.EncodeToString(key) + "\n")
			}
			return writeSecret(cmd.OutOrStdout(), output, key)
		},
	}
	cmd.Flags().StringVar(&output, "output", "", "file to write the key to (mode 0600); without it the key is printed in base64")
	cmd.Flags().BoolVar(&b64, "base64", false, "write the key base64-encoded")
	return cmd
}

func newTokensKeyPairCmd() *cobra.Command {
	var priv, pub, alg string
	cmd := &cobra.Command{
		Use:   "create-key-pair",
		Short: "create a private key to sign tokens with and its public key to verify them",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if priv == "" || pub == "" {
				return fmt.Errorf("--output-private-key and --output-public-key are required")
			}
			privPEM, pubPEM, err := security.GenerateKeyPair(alg)
			if err != nil {
				return fmt.Errorf("--algorithm: %w", err)
			}
			if err := writeSecret(nil, priv, privPEM); err != nil {
				return err
			}
			if err := os.WriteFile(pub, pubPEM, 0o644); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s key pair: private key %s (keep it secret), public key %s (for the brokers' security.auth.keys.public_key_file)\n", alg, priv, pub)
			return nil
		},
	}
	cmd.Flags().StringVar(&priv, "output-private-key", "", "file for the private key (PEM, mode 0600)")
	cmd.Flags().StringVar(&pub, "output-public-key", "", "file for the public key (PEM)")
	cmd.Flags().StringVar(&alg, "algorithm", "RS256", "RS256, ES256 or EdDSA")
	return cmd
}

// signingKey reads the key to sign with from --secret-key or
// --private-key (exactly one).
func signingKey(secretFile, privateFile string) (key any, alg string, err error) {
	switch {
	case (secretFile == "") == (privateFile == ""):
		return nil, "", fmt.Errorf("give exactly one of --secret-key and --private-key")
	case secretFile != "":
		b, err := os.ReadFile(secretFile)
		if err != nil {
			return nil, "", fmt.Errorf("--secret-key: %w", err)
		}
		k := security.DecodeSecretKey(b)
		if len(k) < security.MinSecretKeyBytes {
			return nil, "", fmt.Errorf("--secret-key %s: %d bytes, at least %d", secretFile, len(k), security.MinSecretKeyBytes)
		}
		return k, "HS256", nil
	default:
		b, err := os.ReadFile(privateFile)
		if err != nil {
			return nil, "", fmt.Errorf("--private-key: %w", err)
		}
		key, alg, err := security.ParseSigningKey(b)
		if err != nil {
			return nil, "", fmt.Errorf("--private-key %s: %w", privateFile, err)
		}
		return key, alg, nil
	}
}

func newTokensCreateCmd() *cobra.Command {
	var secretFile, privateFile, subject, expiry, output string
	cmd := &cobra.Command{
		Use:   "create",
		Short: "create a token for a role (the sub claim)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if subject == "" {
				return fmt.Errorf("--subject is required (the role the token authenticates)")
			}
			var exp time.Duration
			if expiry != "" {
				d, err := parseDurationFlag("--expiry", expiry)
				if err != nil {
					return err
				}
				if d < 0 {
					d = 0 // -1: never expires
				}
				exp = d
			}
			key, alg, err := signingKey(secretFile, privateFile)
			if err != nil {
				return err
			}
			tok, err := security.SignToken(key, alg, subject, exp)
			if err != nil {
				return err
			}
			return writeSecret(cmd.OutOrStdout(), output, []byte(tok+"\n"))
		},
	}
	cmd.Flags().StringVar(&secretFile, "secret-key", "", "HS256 secret key file (from create-secret-key)")
	cmd.Flags().StringVar(&privateFile, "private-key", "", "private key file (from create-key-pair)")
	cmd.Flags().StringVar(&subject, "subject", "", "the role (sub claim)")
	cmd.Flags().StringVar(&expiry, "expiry", "", "lifetime such as 1h, 30d, 1w (default: the token does not expire)")
	cmd.Flags().StringVar(&output, "output", "", "file to write the token to (mode 0600); default: printed")
	return cmd
}

// tokenArg returns the token of a show/validate command: the argument,
// or --token-file.
func tokenArg(args []string, file string) (string, error) {
	switch {
	case len(args) == 1 && file == "":
		return strings.TrimSpace(args[0]), nil
	case len(args) == 0 && file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("--token-file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return "", fmt.Errorf("give the token as the argument or with --token-file, not both")
}

func newTokensShowCmd() *cobra.Command {
	var file string
	cmd := &cobra.Command{
		Use:   "show [TOKEN]",
		Short: "print a token's header and claims (without verifying its signature)",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tok, err := tokenArg(args, file)
			if err != nil {
				return err
			}
			claims := jwt.MapClaims{}
			t, _, err := jwt.NewParser().ParseUnverified(tok, claims)
			if err != nil {
				return fmt.Errorf("not a JWT: %v", err)
			}
			out := map[string]any{"header": t.Header, "claims": claims}
			if exp, err := claims.GetExpirationTime(); err == nil && exp != nil {
				out["expires"] = exp.UTC().Format(time.RFC3339)
			}
			enc := json.NewEncoder(cmd.OutOrStdout())
			enc.SetIndent("", "  ")
			return enc.Encode(out)
		},
	}
	cmd.Flags().StringVar(&file, "token-file", "", "read the token from this file")
	return cmd
}

func newTokensValidateCmd() *cobra.Command {
	var file, secretFile, publicFile string
	cmd := &cobra.Command{
		Use:   "validate [TOKEN]",
		Short: "verify a token with the brokers' key and print its role",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			tok, err := tokenArg(args, file)
			if err != nil {
				return err
			}
			v, err := security.LoadVerifier(security.TokenKeys{SecretKeyFile: secretFile, PublicKeyFile: publicFile}, nil)
			if err != nil {
				return err
			}
			defer v.Close()
			role, err := v.Verify(tok)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "valid token for role %s\n", role)
			return nil
		},
	}
	cmd.Flags().StringVar(&file, "token-file", "", "read the token from this file")
	cmd.Flags().StringVar(&secretFile, "secret-key", "", "HS256 secret key file")
	cmd.Flags().StringVar(&publicFile, "public-key", "", "public key file (RS256, ES256, EdDSA)")
	return cmd
}
