package main

import (
	"strings"
	"testing"
)

// TestWebhookSecretFileRemoved checks the removed global secret stops the daemon with a
// message that says what replaces it, rather than leaving every hook silently refused.
func TestWebhookSecretFileRemoved(t *testing.T) {
	_, errOut, code := runOffline("run", "--webhook-addr", ":0", "--webhook-secret-file", "/etc/converge/webhook")
	if code == 0 || !strings.Contains(errOut, "spec.webhook.secretRef") {
		t.Errorf("run with --webhook-secret-file: exit %d, %q; want an error naming spec.webhook.secretRef", code, errOut)
	}
}
