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

// TestRunDefaultServiceAccountFlag checks --default-service-account reaches the daemon's
// options: a name no service account can have stops `converge run` naming the flag.
func TestRunDefaultServiceAccountFlag(t *testing.T) {
	_, errOut, code := runOffline("run", "--default-service-account", "system:serviceaccount:x:y")
	if code == 0 || !strings.Contains(errOut, "--default-service-account") {
		t.Errorf("run with an invalid --default-service-account: exit %d, %q; want an error naming the flag", code, errOut)
	}
}
