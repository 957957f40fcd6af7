package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/converge-dev/converge/e2e/cluster"
)

// TestBuildSubstitute: variables from a .env file, a ConfigMap and a Secret manifest and the
// command line, in that order of precedence (later wins), land in the built objects.
func TestBuildSubstitute(t *testing.T) {
	dir, vars := t.TempDir(), t.TempDir()
	writeSet(t, dir, "x", map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: x}\n" +
		"data: {env: '${env}', region: '${region}', pw: '${pw}', inline: '${inline}', def: '${nope:=d}', esc: '$${env}'}\n"})
	files := map[string]string{
		"vars.env":    "# cluster\nexport env=staging\nregion = \"eu-1\"\ninline=from-env\n\n",
		"cm.yaml":     "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: vars}\ndata: {env: prod}\n",
		"secret.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ndata: {pw: " + base64.StdEncoding.EncodeToString([]byte("hunter22")) + "}\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(vars, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out, errOut, code := runOffline("build", dir,
		"--substitute-from-file", filepath.Join(vars, "vars.env"),
		"--substitute-from-file", filepath.Join(vars, "cm.yaml"),
		"--substitute-from-file", filepath.Join(vars, "secret.yaml"),
		"--substitute", "inline=from-flag", "--strict-substitute")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"env: prod", "region: eu-1", "pw: hunter22", "inline: from-flag", "def: d", "esc: ${env}"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

// TestBuildSubstituteErrors: bad variable files and a strict miss exit 2 naming the file and
// line, or the object, its file and the variable.
func TestBuildSubstituteErrors(t *testing.T) {
	dir, vars := t.TempDir(), t.TempDir()
	writeSet(t, dir, "x", map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: x}\ndata: {k: '${known}-${unknown}'}\n"})
	write := func(name, content string) string {
		p := filepath.Join(vars, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	noEquals, badName := write("a.env", "known=1\njust text\n"), write("b.env", "known=1\n\n1st=x\n")
	deploy := write("d.yaml", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d}\n")
	badKey := write("e.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: vars}\ndata: {my-var: x}\n")
	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"no equals", []string{"--substitute-from-file", noEquals}, []string{noEquals + ":2: want KEY=VALUE"}},
		{"bad name", []string{"--substitute-from-file", badName}, []string{badName + `:3: "1st" is not a valid variable name`}},
		{"not a ConfigMap", []string{"--substitute-from-file", deploy}, []string{deploy + `: document 1: kind "Deployment": want a ConfigMap or Secret`}},
		{"bad key", []string{"--substitute-from-file", badKey}, []string{badKey + `: ConfigMap vars: key "my-var" is not a valid variable name`}},
		{"flag without =", []string{"--substitute", "known"}, []string{`--substitute "known": want NAME=VALUE`}},
		{"strict", []string{"--substitute", "known=1", "--strict-substitute"}, []string{"cm.yaml:1: ConfigMap x/c: ", `variable "unknown" has no value and no default`}},
	} {
		out, errOut, code := runOffline(append([]string{"build", dir}, tc.args...)...)
		if code != 2 || out != "" {
			t.Errorf("%s: exit %d, output %q; want exit 2 and nothing built", tc.name, code, out)
		}
		for _, w := range tc.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%s: error %q does not say %q", tc.name, errOut, w)
			}
		}
	}
}

// TestApplySubstituteSecretNeverPrinted plants a value in a Secret manifest given with
// --substitute-from-file; it flows into a ConfigMap (shown in the --diff) and into a label
// value the API server refuses, quoting it. No output format (text, json, yaml, markdown)
// and no error message shows it; the redaction (***) does. Before the report and the error
// were redacted, every format printed it.
func TestApplySubstituteSecretNeverPrinted(t *testing.T) {
	ns := env.Namespace(t)
	dir, vars := t.TempDir(), t.TempDir()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	planted := "planted-" + hex.EncodeToString(b) + "!"
	writeSet(t, dir, ns, map[string]string{
		"app.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: uses-secret, namespace: NS}\ndata: {password: '${db_password}'}\n",
		"bad.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: bad, namespace: NS, labels: {pw: '${db_password}'}}\n",
	})
	secret := filepath.Join(vars, "db.yaml")
	if err := os.WriteFile(secret, []byte("apiVersion: v1\nkind: Secret\nmetadata: {name: db}\nstringData: {db_password: '"+planted+"'}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, format := range []string{"", "json", "yaml", "markdown"} {
		cmd := newRootCommand()
		var out bytes.Buffer
		cmd.SetOut(&out)
		cmd.SetErr(&out)
		args := []string{"--kubeconfig", env.Kubeconfig, "apply", dir, "--dry-run", "--diff", "--substitute-from-file", secret}
		if format != "" {
			args = append(args, "-o", format)
		}
		cmd.SetArgs(args)
		if err := cmd.ExecuteContext(context.Background()); err != nil {
			out.WriteString("Error: " + err.Error()) // as main prints it
			if exitCode(err) != exitCodeError {
				t.Errorf("-o %q: exit %d, want %d", format, exitCode(err), exitCodeError)
			}
		} else {
			t.Errorf("-o %q: no error; the refused label should fail the run", format)
		}
		if strings.Contains(out.String(), planted) {
			t.Errorf("-o %q prints the Secret value:\n%s", format, out.String())
		}
		if !strings.Contains(out.String(), "***") || !strings.Contains(out.String(), "bad") {
			t.Errorf("-o %q: want the refused object named and the value shown as ***:\n%s", format, out.String())
		}
	}
}

// TestApplyYAMLReportRedactsFoldedValue: -o yaml folds long strings at spaces, so a Secret
// value with spaces (a passphrase) quoted in an API error was split across lines and the
// line-by-line filter missed it; the report's texts are now redacted before any format lays
// them out.
func TestApplyYAMLReportRedactsFoldedValue(t *testing.T) {
	cluster.Require(t, env)
	ns := env.Namespace(t)
	dir := t.TempDir()
	const pw = "correct horse battery staple in a long passphrase"
	writeFiles(t, dir, map[string]string{
		"vars/secret.yaml": "apiVersion: v1\nkind: Secret\nmetadata: {name: v}\nstringData:\n  pw: " + pw + "\n",
		"set/cm.yaml":      "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: " + ns + "\n  labels:\n    pw: ${pw}\n",
	})
	for _, o := range []string{"", "json", "yaml", "markdown"} {
		args := []string{"apply", filepath.Join(dir, "set"), "-n", ns, "--dry-run", "--substitute-from-file", filepath.Join(dir, "vars/secret.yaml")}
		if o != "" {
			args = append(args, "-o", o)
		}
		out, errOut, code := cliErr(args...)
		if l := leaks(out+errOut, "battery staple", "long passphrase"); len(l) > 0 {
			t.Errorf("-o %q (exit %d): the output holds part of the Secret value:\n%s%s", o, code, out, errOut)
		}
	}
}

// TestBuildSubstituteBoundedByFlags: the bytes substitution inserts are bounded by the
// command's --max-file-size (per object) and --max-total-size (in all), as the error says:
// a 100-byte value named 40 times passes a --max-file-size of 2000. Were the bounds the
// defaults (8 MiB, 256 MiB) whatever the flags, the object would be built.
func TestBuildSubstituteBoundedByFlags(t *testing.T) {
	dir := t.TempDir()
	writeSet(t, dir, "x", map[string]string{"cm.yaml": "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, namespace: x}\n" +
		"data: {k: '" + strings.Repeat("${v}", 40) + "'}\n"})
	value := "v=" + strings.Repeat("x", 100)
	for _, tc := range []struct {
		flag, want string
	}{
		{"--max-file-size=2000", "larger than 2000 bytes (raise the limit with --max-file-size)"},
		{"--max-total-size=3000", "more than 3000 bytes into the render's objects (raise the limit with --max-total-size)"},
	} {
		out, errOut, code := runOffline("build", dir, "--substitute", value, tc.flag)
		if code != 2 || out != "" || !strings.Contains(errOut, tc.want) {
			t.Errorf("%s: exit %d, %d bytes output, error %q; want exit 2 saying %q", tc.flag, code, len(out), errOut, tc.want)
		}
	}
	if _, errOut, code := runOffline("build", dir, "--substitute", value); code != 0 {
		t.Errorf("under the default bounds: exit %d: %s", code, errOut)
	}
}
