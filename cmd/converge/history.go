package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/cli-runtime/pkg/printers"
	"sigs.k8s.io/yaml"

	"github.com/converge-dev/converge/status/v1alpha1"
)

const historyLong = `Print the last distinct outcomes of a Sync (status.history), newest first: when the
outcome was last and first recorded, the generation and revision it was about, the Ready status
and reason, what the Sync's last change did (CHANGES, from status.summary), how long the
reconcile took, how many status writes found it (COUNT) and the start of its message.

A Sync keeps its last 10 outcomes. A reconcile that changes nothing writes no status, so
COUNT and LAST SEEN move only when the status is written for another reason.

-o json and -o yaml print the entries as a list, newest first. A Sync that does not exist is
an error with exit code 1, as kubectl's; other errors (no cluster, no Sync API) exit 2. A Sync
with no history yet prints nothing and says so on stderr.`

// historyOptions are the flags of `converge history`.
type historyOptions struct {
	kube   *kubeFlags
	output string
}

func newHistoryCommand(kube *kubeFlags) *cobra.Command {
	o := &historyOptions{kube: kube}
	cmd := syncVerb(kube, "history SYNC",
		"Print the last outcomes of a Sync: revision, result, changes, duration, newest first",
		historyLong, `  converge history -n apps web
  converge history -n apps web -o json | jq -r '.[0].revision'`,
		func(cmd *cobra.Command, name string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), name)
		})
	addRowOutputFlag(cmd, &o.output)
	return cmd
}

// run reads the Sync name of the namespace of --namespace and prints its history.
func (o *historyOptions) run(ctx context.Context, out, errOut io.Writer, name string) error {
	if err := checkRowFormat(o.output); err != nil {
		return err
	}
	ns := o.kube.namespace()
	_, s, err := readSync(ctx, o.kube, name)
	if err != nil {
		return err
	}
	h := s.Status.History
	if h == nil {
		h = []v1alpha1.HistoryEntry{}
	}
	switch o.output {
	case "json":
		b, err := json.MarshalIndent(h, "", "    ")
		if err != nil {
			return err
		}
		_, err = fmt.Fprintf(out, "%s\n", b)
		return err
	case "yaml":
		b, err := yaml.Marshal(h)
		if err != nil {
			return err
		}
		_, err = out.Write(b)
		return err
	}
	if len(h) == 0 {
		fmt.Fprintf(errOut, "No history for sync %s/%s yet.\n", ns, name)
		return nil
	}
	return writeTable(printers.GetNewTabWriter(out), historyColumns(clock()), h, false)
}

// historyColumns are the columns of `converge history`, kubectl get events' LAST SEEN first.
func historyColumns(now time.Time) []column[v1alpha1.HistoryEntry] {
	return []column[v1alpha1.HistoryEntry]{
		{"LAST SEEN", true, func(e v1alpha1.HistoryEntry) string { return age(now, e.LastSeen) }},
		{"FIRST SEEN", true, func(e v1alpha1.HistoryEntry) string { return age(now, e.FirstSeen) }},
		{"GEN", true, func(e v1alpha1.HistoryEntry) string { return fmt.Sprint(e.Generation) }},
		{"REVISION", true, func(e v1alpha1.HistoryEntry) string { return e.Revision }},
		{"READY", true, func(e v1alpha1.HistoryEntry) string { return string(e.Ready) }},
		{"REASON", true, func(e v1alpha1.HistoryEntry) string { return e.Reason }},
		{"CHANGES", true, func(e v1alpha1.HistoryEntry) string { return changes(e.Summary) }},
		{"DURATION", true, func(e v1alpha1.HistoryEntry) string {
			if e.Duration == nil {
				return ""
			}
			return e.Duration.Round(time.Millisecond).String()
		}},
		{"COUNT", true, func(e v1alpha1.HistoryEntry) string { return fmt.Sprint(e.Count) }},
		{"MESSAGE", true, func(e v1alpha1.HistoryEntry) string { return cut(firstLine(e.Message), 80) }},
	}
}

// age is how long before now t was, as kubectl prints ages; "" for no time.
func age(now time.Time, t metav1.Time) string {
	if t.IsZero() {
		return ""
	}
	return duration.HumanDuration(now.Sub(t.Time))
}

// changes prints the non-zero counts of a summary: "created=2 configured=1 unchanged=7".
func changes(s *v1alpha1.Summary) string {
	if s == nil {
		return ""
	}
	var parts []string
	for _, c := range []struct {
		name string
		n    int
	}{{"created", s.Created}, {"configured", s.Configured}, {"pruned", s.Pruned}, {"failed", s.Failed},
		{"notReady", s.NotReady}, {"skipped", s.Skipped}, {"unchanged", s.Unchanged}} {
		if c.n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", c.name, c.n))
		}
	}
	return strings.Join(parts, " ")
}
