package server

import (
	"bytes"
	"io"
	"os"
	"runtime"

	"github.com/forewarn/forewarn"
	"github.com/forewarn/forewarn/webhook"
)

// minWebhookSecretBytes is the shortest webhook secret the server takes.
const minWebhookSecretBytes = 16

// loadSecret reads the shared secret of the flag flag from path: the
// file's content without the white space around it. A file that others
// than its owner can read or change, or an empty one, is refused; what
// names what the file should hold.
func loadSecret(flag, path, what string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, forewarn.Errorf(forewarn.EINVALID, "%s: %v", flag, err)
	}
	defer f.Close()
	info, err := f.Stat()
	if err != nil {
		return nil, forewarn.Errorf(forewarn.EINVALID, "%s: %v", flag, err)
	}
	// Windows has no group and other permission bits to check.
	if perm := info.Mode().Perm(); perm&0o077 != 0 && runtime.GOOS != "windows" {
		return nil, forewarn.Errorf(forewarn.EINVALID, "%s %s has mode %04o: others than its owner can read or change it; run: chmod 600 %s", flag, path, perm, path)
	}
	b, err := io.ReadAll(f)
	if err != nil {
		return nil, forewarn.Errorf(forewarn.EINVALID, "%s: %v", flag, err)
	}
	secret := bytes.TrimSpace(b)
	if len(secret) == 0 {
		return nil, forewarn.Errorf(forewarn.EINVALID, "%s %s is empty: write %s to it", flag, path, what)
	}
	return secret, nil
}

// validateWebhooks reports whether the webhook settings are whole: valid
// URLs, and a secret file with any of them.
func (c *Config) validateWebhooks() error {
	for _, u := range c.Webhooks {
		if err := forewarn.ValidWebhookURL(u); err != nil {
			return forewarn.Errorf(forewarn.EINVALID, "--webhook: %s", forewarn.ErrorMessage(err))
		}
	}
	if len(c.Webhooks) > 0 && c.WebhookSecretFile == "" {
		return forewarn.Errorf(forewarn.EINVALID, "--webhook needs --webhook-secret-file FILE: the secret (at least %d bytes, mode 0600) that signs every delivery, which the receivers check", minWebhookSecretBytes)
	}
	return nil
}

// loadWebhookSecret loads --webhook-secret-file, when given.
func loadWebhookSecret(path string) ([]byte, error) {
	if path == "" {
		return nil, nil
	}
	secret, err := loadSecret("--webhook-secret-file", path, "a random secret, shared with the receivers,")
	if err != nil {
		return nil, err
	}
	if len(secret) < minWebhookSecretBytes {
		return nil, forewarn.Errorf(forewarn.EINVALID, "--webhook-secret-file %s holds %d bytes, fewer than %d: write a longer random secret, e.g. openssl rand -hex 32", path, len(secret), minWebhookSecretBytes)
	}
	return secret, nil
}

// newWebhooks starts the sender of the sessions' transitions, signing
// with secret. Without a secret the sender is not configured: it sends
// nothing, and sessions may not name webhooks.
func (s *Server) newWebhooks(secret []byte) (*webhook.Sender, error) {
	hooks, err := webhook.New(webhook.Config{Engine: s.eng, Secret: secret, URLs: s.cfg.Webhooks, Observer: s.mets, Logger: s.log})
	if err != nil {
		return nil, err
	}
	if !hooks.Configured() {
		for _, ses := range s.eng.Sessions() {
			if len(ses.Spec.Webhooks) > 0 && ses.State != forewarn.SessionDone {
				s.log.Warn("a session names webhooks, but the server has no --webhook-secret-file: its transitions are not delivered", "session", ses.ID)
			}
		}
	}
	return hooks, nil
}
