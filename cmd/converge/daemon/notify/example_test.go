package notify_test

import (
	"context"
	"fmt"

	"github.com/converge-dev/converge/cmd/converge/daemon/notify"
)

// Example shows the wiring a reconciler needs: one Dispatcher run beside the controllers,
// and after a status write, the transitions between the settled state read and the one
// written, sent to the Sync's providers (their secrets read as the Sync's identity).
func Example() {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d := notify.New(notify.Options{
		OnFailed: func(p notify.Provider, e notify.Event, err error) {
			fmt.Println("metric and Warning event:", p.Name, err) // converge_notifications_total{result="failed"}
		},
	})
	go func() { _ = d.Start(ctx) }() // mgr.Add(d) in the daemon

	prev := notify.State{Ready: notify.ReadyTrue, Revision: "main@sha1:aaaa"}
	next := notify.State{Ready: notify.ReadyFalse, Revision: "main@sha1:bbbb"}
	providers := []notify.Provider{{Name: "apps/chat", Type: notify.Slack, Address: "https://hooks.slack.com/services/T/B/X"}}
	for _, tr := range notify.Transitions(prev, next) {
		for _, p := range providers {
			d.Send(p, notify.Event{Namespace: "apps", Name: "web", Transition: tr, Revision: next.Revision,
				Reason: "HealthCheckFailed", Message: "Deployment/apps/web not Current", Cluster: "prod-eu"})
		}
	}
	// remember notify.Settle(prev, next) as the next prev
}
