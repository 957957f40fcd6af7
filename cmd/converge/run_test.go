package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/converge-dev/converge/cmd/converge/daemon"
	"github.com/converge-dev/converge/sources/git"
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

// TestRunRefMeansWhatBuildRefMeans: `run`'s quick start reads --ref as build and apply do
// (a prefix names the kind); without it, any --ref was a branch name, so "bogus:v1" started a
// daemon following a branch of that name.
func TestRunRefMeansWhatBuildRefMeans(t *testing.T) {
	_, errOut, code := runOffline("run", "--git-url", "https://git.example/apps.git", "--ref", "bogus:v1")
	if code == 0 || !strings.Contains(errOut, "want branch:, tag:, semver: or commit: before the colon") {
		t.Errorf("run --ref bogus:v1: exit %d, %q; want the --ref parse error", code, errOut)
	}
	for _, tt := range []struct {
		args []string
		want git.Ref
	}{
		{[]string{"--ref", "tag:v1"}, git.Ref{Tag: "v1"}},
		{[]string{"--ref", strings.Repeat("ab", 20)}, git.Ref{Commit: strings.Repeat("ab", 20)}},
		{[]string{"--ref-semver", ">=1.0.0"}, git.Ref{SemVer: ">=1.0.0"}},
		{[]string{"--tag", "v2"}, git.Ref{Tag: "v2"}}, // the deprecated spelling still works
		{nil, git.Ref{}},
	} {
		cmd := &cobra.Command{}
		q := daemon.DefaultQuickStart()
		var ref refFlags
		addQuickStartFlags(cmd, &q, &ref)
		if err := cmd.Flags().Parse(tt.args); err != nil {
			t.Fatalf("%v: %v", tt.args, err)
		}
		if got, err := ref.resolve(); err != nil || got != tt.want {
			t.Errorf("%v: ref %+v, %v; want %+v", tt.args, got, err, tt.want)
		}
	}
}
