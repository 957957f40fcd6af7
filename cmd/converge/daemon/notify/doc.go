// Package notify delivers a Sync's transitions (became Ready, failed, drifted, rolled back)
// to a team's receivers: a generic JSON webhook (optionally HMAC-signed), Slack-compatible
// and Microsoft Teams incoming webhooks, and commit statuses on GitHub, GitLab and Gitea.
//
// It owns three things and nothing else:
//
//   - Transitions: a pure function of the Sync's state before and after a reconcile that
//     says what to send, so a steady state sends nothing.
//   - Requests: each provider's documented request, built from an Event and a Provider whose
//     secrets the caller has already read (as the Sync's identity).
//   - Delivery: a Dispatcher whose Send never blocks. A bounded queue (when it is full, or
//     a namespace holds its share, the oldest delivery is dropped), a few workers, each attempt under a timeout, retries with
//     exponential back-off bounded in attempts and in total time, and outcomes reported
//     through hooks the daemon turns into a metric and a Kubernetes event.
//
// A provider address is tenant input. Connections go through sources/netguard's dial guard
// (the daemon's machine, its link and cloud metadata services are refused, plus any
// prefixes the caller denies, such as the API server's), redirects are refused so no
// credential reaches another host, no proxy is used (a proxy would dial for us, past the
// guard), and errors never carry a token, a password, an HMAC key or the address's path and
// query (a Slack or Teams webhook URL is itself a credential).
//
// It must not import the daemon, client-go, controller-runtime or Prometheus: it takes and
// gives plain values.
package notify
