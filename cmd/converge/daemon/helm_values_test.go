package daemon

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// valuesChart renders one ConfigMap "<release>-values" showing the values a, b, c and
// d.tag; a password value fails the render, quoting it.
var valuesChart = map[string]string{
	"Chart.yaml":  "apiVersion: v2\nname: vals\nversion: 0.1.0\n",
	"values.yaml": "a: chart\nb: chart\nc: chart\nd: {tag: chart}\n",
	"templates/cm.yaml": `{{- if .Values.password }}{{ fail (print "refusing password " .Values.password) }}{{ end -}}
apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-values
data:
  a: {{ .Values.a | quote }}
  b: {{ .Values.b | quote }}
  c: {{ .Values.c | quote }}
  tag: {{ .Values.d.tag | quote }}
`,
}

// withValues sets spec.source.helm with inline values and valuesFrom.
func withValues(inline string, from ...v1alpha1.ValuesReference) func(*v1alpha1.Sync) {
	return func(s *v1alpha1.Sync) {
		s.Spec.Source.Helm = &v1alpha1.HelmSource{ValuesFrom: from}
		if inline != "" {
			s.Spec.Source.Helm.Values = &apiextensionsv1.JSON{Raw: []byte(inline)}
		}
	}
}

// waitData waits for ConfigMap name to hold data.
func (f *fixture) waitData(name string, want map[string]string) {
	f.t.Helper()
	var last *corev1.ConfigMap
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		var err error
		last, err = f.configMap(name)
		return err == nil && equalData(last, want), nil
	})
	if err != nil {
		f.t.Fatalf("ConfigMap %s holds %v, want %v", name, last.Data, want)
	}
}

// TestDaemonHelmValuesFrom: the values of a ConfigMap, then of a Secret's key, then a
// ConfigMap key set at a targetPath, then the Sync's own values are merged in that order
// (a later one wins); an optional ConfigMap that does not exist is skipped. A change of
// the ConfigMap, which makes no new revision, is rendered and applied on the next
// reconcile. A required reference to a missing ConfigMap fails the reconcile naming the
// entry and the object, the objects applied before kept (I8).
func TestDaemonHelmValuesFrom(t *testing.T) {
	f := newFixture(t)
	f.createObject(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "base"}, Data: map[string]string{"values.yaml": "a: cm\nb: cm\nc: cm\n"}})
	f.createObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"}, StringData: map[string]string{"vals": "b: secret\nc: secret\n"}})
	f.createObject(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "release"}, Data: map[string]string{"tag": "v1.2.3"}})
	rev := f.publish(valuesChart)
	f.startDaemon(env.Config)
	refs := []v1alpha1.ValuesReference{
		{Kind: "ConfigMap", Name: "base"},
		{Kind: "ConfigMap", Name: "absent", Optional: true},
		{Kind: "Secret", Name: "creds", ValuesKey: "vals"},
		{Kind: "ConfigMap", Name: "release", ValuesKey: "tag", TargetPath: "d.tag"},
	}
	f.createSync(time.Hour, withValues(`{"c":"inline"}`, refs...))
	f.waitSync("Ready", readyAt(rev))
	f.waitData("app-values", map[string]string{"a": "cm", "b": "secret", "c": "inline", "tag": "v1.2.3"})

	// The ConfigMap changes: no new revision, a new render.
	base, _ := f.configMap("base")
	base.Data["values.yaml"] = "a: cm2\n"
	if err := f.c.Update(context.Background(), base); err != nil {
		t.Fatal(err)
	}
	f.requestReconcile("app")
	f.waitData("app-values", map[string]string{"a": "cm2", "b": "secret", "c": "inline", "tag": "v1.2.3"})

	// A required reference to a ConfigMap that does not exist.
	f.updateSync("app", func(s *v1alpha1.Sync) {
		s.Spec.Source.Helm.ValuesFrom = append(s.Spec.Source.Helm.ValuesFrom, v1alpha1.ValuesReference{Kind: "ConfigMap", Name: "gone"})
	})
	c := f.failedWith(reasonBuildFailed)
	want := "spec.source.helm.valuesFrom[4]: ConfigMap " + f.ns + "/gone read as "
	if !strings.HasPrefix(c.Message, want) || !strings.Contains(c.Message, "not found") {
		t.Errorf("message %q, want it to start %q and say not found", c.Message, want)
	}
	if cm, err := f.configMap("app-values"); err != nil || cm.Data["a"] != "cm2" {
		t.Errorf("app-values after the failure: %v, %v; want it kept as applied", cm.Data, err)
	}
}

// TestDaemonHelmValuesFromSecretNeverShown: a Secret's key that is not a YAML mapping
// fails the reconcile naming the Secret and the key, without its content (the YAML
// parser's message quotes part of it: "cannot decode !!str `…` as a !!int"); once valid, a Secret value that a template quotes in its
// error is redacted. Neither the status, nor the Sync's events, nor the daemon's logs
// ever show the value.
func TestDaemonHelmValuesFromSecretNeverShown(t *testing.T) {
	logs := captureLogs(t)
	f := newFixture(t)
	planted := plantedValue(t)
	f.createObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db"}, StringData: map[string]string{"values.yaml": "a: !!int " + planted}})
	f.publish(valuesChart)
	f.startDaemon(env.Config)
	f.createSync(time.Hour, withValues("", v1alpha1.ValuesReference{Kind: "Secret", Name: "db"}))
	c := f.failedWith(reasonBuildFailed)
	want := "spec.source.helm.valuesFrom[0]: Secret " + f.ns + `/db key "values.yaml": not a YAML mapping of values`
	if !strings.HasPrefix(c.Message, want) {
		t.Errorf("message %q, want it to start %q", c.Message, want)
	}
	texts := map[string]string{"status (invalid YAML)": f.statusText()}

	sec := &corev1.Secret{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "db"}, sec); err != nil {
		t.Fatal(err)
	}
	sec.Data["values.yaml"] = []byte("password: " + planted + "\n")
	if err := f.c.Update(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	f.requestReconcile("app")
	s := f.waitSync("the template's error", func(s *v1alpha1.Sync) bool {
		c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		return c != nil && strings.Contains(c.Message, "refusing password")
	})
	if c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady); !strings.Contains(c.Message, "refusing password ***") {
		t.Errorf("message %q: want the password redacted", c.Message)
	}
	texts["status (template error)"] = f.statusText()

	// The same through a targetPath, quoted: the value set, and quoted in the error, is
	// the text inside the quotes.
	planted2 := plantedValue(t)
	sec.Data["pw"] = []byte("'" + planted2 + "'")
	if err := f.c.Update(context.Background(), sec); err != nil {
		t.Fatal(err)
	}
	f.updateSync("app", func(s *v1alpha1.Sync) {
		s.Spec.Source.Helm.ValuesFrom = []v1alpha1.ValuesReference{{Kind: "Secret", Name: "db", ValuesKey: "pw", TargetPath: "password"}}
	})
	s = f.waitSync("the template's error with the targetPath value", func(s *v1alpha1.Sync) bool {
		c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady)
		return s.Status.ObservedGeneration == s.Generation && c != nil && strings.Contains(c.Message, "refusing password")
	})
	if c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady); !strings.Contains(c.Message, "refusing password ***") {
		t.Errorf("message %q: want the targetPath password redacted", c.Message)
	}
	texts["status (targetPath)"] = f.statusText()
	texts["events"] = f.syncEvents()
	klog.Flush()
	texts["logs"] = logs.String()
	for channel, text := range texts {
		if strings.Contains(text, strings.TrimSuffix(planted, "!")) || strings.Contains(text, strings.TrimSuffix(planted2, "!")) {
			t.Errorf("the Secret value appears in the %s:\n%s", channel, text)
		}
	}
	if !strings.Contains(texts["events"], "refusing password") || !strings.Contains(logs.String(), "reconciled") {
		t.Errorf("no event or log was captured: the test would not see a leak there")
	}
}

// statusText is the Sync's status as JSON.
func (f *fixture) statusText() string {
	f.t.Helper()
	s := &v1alpha1.Sync{}
	if err := f.c.Get(context.Background(), client.ObjectKey{Namespace: f.ns, Name: "app"}, s); err != nil {
		f.t.Fatal(err)
	}
	js, _ := json.Marshal(s.Status)
	return string(js)
}

// syncEvents is the text of the events about Syncs in the fixture's namespace.
func (f *fixture) syncEvents() string {
	f.t.Helper()
	events := &corev1.EventList{}
	if err := f.c.List(context.Background(), events, client.InNamespace(f.ns)); err != nil {
		f.t.Fatal(err)
	}
	var b strings.Builder
	for _, e := range events.Items {
		if e.InvolvedObject.Kind == "Sync" {
			b.WriteString(e.Type + " " + e.Reason + " " + e.Message + "\n")
		}
	}
	return b.String()
}

// TestDaemonHelmValuesFromAsTheServiceAccount: a Sync acting as a service account that may
// not read Secrets cannot have the daemon read one for it by naming it in valuesFrom
// (I13): Ready=False naming the entry, the Secret, the identity and the refusal, nothing
// applied.
func TestDaemonHelmValuesFromAsTheServiceAccount(t *testing.T) {
	f := newFixture(t)
	f.deployer() // ConfigMaps only
	f.createObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "admin-values"}, StringData: map[string]string{"values.yaml": "a: not-yours\n"}})
	f.publish(valuesChart)
	f.startDaemon(env.Config)
	f.createSync(time.Hour, func(s *v1alpha1.Sync) { s.Spec.ServiceAccountName = "deployer" },
		withValues("", v1alpha1.ValuesReference{Kind: "Secret", Name: "admin-values"}))
	c := f.failedWith(reasonBuildFailed)
	for _, w := range []string{"spec.source.helm.valuesFrom[0]: Secret " + f.ns + "/admin-values read as system:serviceaccount:" + f.ns + ":deployer", "forbidden"} {
		if !strings.Contains(c.Message, w) {
			t.Errorf("message %q does not say %q", c.Message, w)
		}
	}
	if _, err := f.configMap("app-values"); err == nil {
		t.Error("the chart was applied with values from a Secret the service account may not read")
	}
}

// TestDaemonHelmValuesFromNoOp is I7 with valuesFrom: once converged, each reconcile
// costs one GET per valuesFrom entry (as the Sync's identity, uncached) and nothing else:
// no write, and no new render (the values are the same, so is the render cache's key).
func TestDaemonHelmValuesFromNoOp(t *testing.T) {
	f := newFixture(t)
	f.createObject(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "base"}, Data: map[string]string{"values.yaml": "a: cm\n"}})
	f.createObject(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "creds"}, StringData: map[string]string{"values.yaml": "b: secret\n"}})
	rev := f.publish(valuesChart)
	n := &noOpCounter{}
	f.startDaemon(n.config(), n.options)
	f.createSync(2*time.Second, withValues("", v1alpha1.ValuesReference{Kind: "ConfigMap", Name: "base"}, v1alpha1.ValuesReference{Kind: "Secret", Name: "creds"}))
	f.waitSync("Ready", readyAt(rev))
	all, writes := n.requests(t, 3)
	if len(writes) > 0 {
		t.Errorf("I7: no-op reconciles with valuesFrom sent writes: %v", writes)
	}
	reads := 0
	for _, r := range all {
		if r == "GET /api/v1/namespaces/"+f.ns+"/configmaps/base" || r == "GET /api/v1/namespaces/"+f.ns+"/secrets/creds" {
			reads++
		}
	}
	if reads != 6 || len(all) != 6 {
		t.Errorf("3 no-op reconciles with 2 valuesFrom entries sent %d requests, %d of them reads of the entries; want those 6 only: %v", len(all), reads, all)
	}
}

// TestDaemonHelmValuesBounded: values read from ConfigMaps a tenant fills up are refused
// once they pass 4 MiB together, naming the entry and the limit; nothing is applied.
func TestDaemonHelmValuesBounded(t *testing.T) {
	f := newFixture(t)
	var refs []v1alpha1.ValuesReference
	for _, name := range []string{"v1", "v2", "v3", "v4", "v5"} {
		f.createObject(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name},
			Data: map[string]string{"values.yaml": name + ": " + strings.Repeat("x", 900<<10) + "\n"}})
		refs = append(refs, v1alpha1.ValuesReference{Kind: "ConfigMap", Name: name})
	}
	f.publish(valuesChart)
	f.startDaemon(env.Config)
	f.createSync(time.Hour, withValues("", refs...))
	c := f.failedWith(reasonBuildFailed)
	want := "spec.source.helm.valuesFrom[4]: ConfigMap " + f.ns + `/v5 key "values.yaml": the Helm values pass 4 MiB`
	if !strings.HasPrefix(c.Message, want) {
		t.Errorf("message %q, want it to start %q", c.Message, want)
	}
	if _, err := f.configMap("app-values"); err == nil {
		t.Error("the chart was applied")
	}
}

// TestDaemonHelmValuesAliasesBounded: a valuesFrom ConfigMap of 128 KiB whose YAML aliases
// stand for hundreds of MiB is refused before it is decoded, naming it, and nothing is
// applied (without it: 2.4 GB was allocated decoding it in the daemon, past the shipped
// 512 MiB limit).
func TestDaemonHelmValuesAliasesBounded(t *testing.T) {
	f := newFixture(t)
	var b strings.Builder
	b.WriteString("a: &a \"" + strings.Repeat("x", 100<<10) + "\"\n")
	for i := range 3000 {
		fmt.Fprintf(&b, "k%d: *a\n", i)
	}
	f.createObject(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bomb"}, Data: map[string]string{"values.yaml": b.String()}})
	f.publish(valuesChart)
	f.startDaemon(env.Config)
	f.createSync(time.Hour, withValues("", v1alpha1.ValuesReference{Kind: "ConfigMap", Name: "bomb"}))
	c := f.failedWith(reasonBuildFailed)
	want := "spec.source.helm.valuesFrom[0]: ConfigMap " + f.ns + `/bomb key "values.yaml": its YAML aliases expand the values past 4 MiB`
	if !strings.HasPrefix(c.Message, want) {
		t.Errorf("message %q, want it to start %q", c.Message, want)
	}
	if _, err := f.configMap("app-values"); err == nil {
		t.Error("the chart was applied")
	}
}
