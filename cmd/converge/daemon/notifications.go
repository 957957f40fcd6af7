package daemon

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/daemon/notify"
	"github.com/converge-dev/converge/status"
	"github.com/converge-dev/converge/status/v1alpha1"
)

// notifier sends a Sync's transitions to its spec.notifications after its status write.
type notifier struct {
	d       *notify.Dispatcher
	cluster string
}

// dispatcherRunnable runs the Dispatcher on every replica, leader or not: a replica that
// reconciles nothing sends nothing.
type dispatcherRunnable struct{ *notify.Dispatcher }

func (dispatcherRunnable) NeedLeaderElection() bool { return false }

// addNotifier runs a notify.Dispatcher beside the controller and wires r to it: deliveries
// are counted in converge_notifications_total, a failure is a Warning event
// NotificationFailed on the Sync. The API server's address is denied to receivers.
func addNotifier(ctx context.Context, mgr ctrl.Manager, cfg *rest.Config, r *reconciler, o Options) error {
	opts := o.test.notify
	opts.Deny = append(opts.Deny, apiServerPrefixes(ctx, cfg.Host, opts.AllowLocal)...)
	// A delivery ending after its Sync was forgotten, or replaced by a Sync that took its
	// name, counts nothing and records nothing: its series were deleted with the Sync, and
	// would come back with no Sync to delete them again, or be counted on another. The check
	// and the count are one step under the registry's lock, so a forget cannot come between.
	ofSync := func(e notify.Event, f func()) {
		r.states.current(types.NamespacedName{Namespace: e.Namespace, Name: e.Name}, types.UID(e.UID), f)
	}
	count := func(p notify.Provider, e notify.Event, result string) {
		ofSync(e, func() { r.metrics.notified(e.Namespace, e.Name, string(p.Type), result) })
	}
	opts.OnDelivered = func(p notify.Provider, e notify.Event) { count(p, e, "delivered") }
	opts.OnDropped = func(p notify.Provider, e notify.Event) { count(p, e, "dropped") }
	opts.OnFailed = func(p notify.Provider, e notify.Event, err error) {
		var known bool
		ofSync(e, func() {
			known = true
			r.metrics.notified(e.Namespace, e.Name, string(p.Type), "failed")
		})
		if known {
			notificationFailed(mgr.GetClient(), r.events, p, e, err)
		}
	}
	d := notify.New(opts)
	r.notifier = &notifier{d: d, cluster: o.ClusterName}
	return mgr.Add(dispatcherRunnable{d})
}

// notificationFailed records a failed delivery as a Warning event on the Sync (its UID read
// from the cache, no API request).
func notificationFailed(c client.Reader, events record.EventRecorder, p notify.Provider, e notify.Event, err error) {
	s := &v1alpha1.Sync{}
	key := types.NamespacedName{Namespace: e.Namespace, Name: e.Name}
	if c.Get(context.Background(), key, s) != nil {
		s = &v1alpha1.Sync{ObjectMeta: metav1.ObjectMeta{Namespace: e.Namespace, Name: e.Name}}
	}
	to := string(p.Type)
	if p.Address != "" {
		to += " " + p.Address // scheme and host only: the Dispatcher's hooks get no more
	}
	events.Eventf(s, corev1.EventTypeWarning, "NotificationFailed", "%s of revision %s to %s: %v",
		e.Transition, e.Revision, to, err)
}

// apiServerPrefixes are the API server's addresses as host prefixes, for the dial guard to
// refuse: a receiver's address must not reach it. A loopback API server is left out when
// local receivers are allowed (tests, a receiver beside the daemon); the guard refuses
// loopback otherwise.
func apiServerPrefixes(ctx context.Context, host string, allowLocal bool) []netip.Prefix {
	u, err := url.Parse(host)
	if err != nil || u.Hostname() == "" {
		return nil
	}
	var addrs []netip.Addr
	if a, err := netip.ParseAddr(u.Hostname()); err == nil {
		addrs = append(addrs, a)
	} else {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		resolved, err := net.DefaultResolver.LookupNetIP(ctx, "ip", u.Hostname())
		if err != nil {
			ctrl.Log.WithName("notify").Info("API server address not resolved: not denied to receivers by address", "host", u.Hostname(), "error", err.Error())
		}
		addrs = append(addrs, resolved...)
	}
	var out []netip.Prefix
	for _, a := range addrs {
		a = a.Unmap()
		if allowLocal && a.IsLoopback() {
			continue
		}
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out
}

// stateOf is the notification state of a Sync's status as read before a reconcile.
func stateOf(s *v1alpha1.Sync) notify.State {
	st := notify.State{Revision: s.Status.LastAttemptedRevision, RolledBackFrom: rolledBackFrom(s, status.Outcome{})}
	if c := meta.FindStatusCondition(s.Status.Conditions, v1alpha1.ConditionReady); c != nil {
		st.Ready = notify.Ready(c.Status)
	}
	st.Drifted = meta.IsStatusConditionTrue(s.Status.Conditions, v1alpha1.ConditionDrifted)
	return st
}

// notify sends the transitions from s's last settled state to the outcome just written to
// each of s's spec.notifications. It never blocks: the Dispatcher queues, and a provider's
// Secret is read (as the Sync's identity) in a delivery worker, only when there is something
// to send.
func (r *reconciler) notify(s *v1alpha1.Sync, o status.Outcome) {
	if r.notifier == nil || len(s.Spec.Notifications) == 0 {
		return
	}
	next := notify.State{Ready: notify.Ready(o.Ready), Revision: o.AttemptedRevision, RolledBackFrom: rolledBackFrom(s, o)}
	var transitions []notify.Transition
	r.states.with(client.ObjectKeyFromObject(s), func(st *syncState) {
		prev := stateOf(s)
		if st.settled != nil {
			prev = *st.settled
		}
		// The Drifted condition as this outcome left it: set when it judged drift, kept
		// otherwise (a failed fetch knows nothing of it).
		next.Drifted = prev.Drifted
		if o.DriftKnown {
			next.Drifted = o.Drift != nil
		}
		transitions = notify.Transitions(prev, next)
		settled := notify.Settle(prev, next)
		st.settled = &settled
	})
	if len(transitions) == 0 {
		return
	}
	for i, n := range s.Spec.Notifications {
		p := notify.Provider{Name: fmt.Sprintf("%s/%s/notifications/%d", s.Namespace, s.Name, i),
			Type: notify.Type(n.Type), Address: n.Address, Channel: n.Channel}
		resolve := r.notificationSecret(s, i, n)
		for _, tr := range transitions {
			if sends(n, tr) {
				revision, reason, msg := o.AttemptedRevision, o.Reason, o.Message
				if tr == notify.RolledBack {
					revision = rolledBackFrom(s, o) // the revision left: its commit status reads failure
				}
				if tr == notify.Drifted && o.Drift != nil { // what drifted, and who changed it
					reason = v1alpha1.ReasonDriftDetected
					msg = r.redact(s, v1alpha1.DescribeDrift(o.Drift.Objects, o.Drift.MoreObjects, driftEventObjects))
				}
				r.notifier.d.SendResolving(p, resolve, notify.Event{Namespace: s.Namespace, Name: s.Name, UID: string(s.UID), Transition: tr,
					Revision: revision, Reason: reason, Message: msg, Time: time.Now().UTC(), Cluster: r.notifier.cluster})
			}
		}
	}
}

// sends says whether n sends tr: its spec.notifications[].on, or every transition.
func sends(n v1alpha1.Notification, tr notify.Transition) bool {
	if len(n.On) == 0 {
		return true
	}
	for _, on := range n.On {
		if string(on) == string(tr) {
			return true
		}
	}
	return false
}

// notificationSecret completes the provider of s's notification i from its Secret, read
// as the Sync's identity when the delivery starts, with Flux's keys: address, token
// (generic-hmac: the HMAC key), username, password, ca.crt. It is nil without a secretRef.
// The identity's client is taken now, in the reconcile: a delivery after the Sync is gone
// leaves nothing behind in the daemon's per-Sync state.
func (r *reconciler) notificationSecret(s *v1alpha1.Sync, i int, n v1alpha1.Notification) notify.Resolve {
	if n.SecretRef == nil {
		return nil
	}
	ns, name, identity := s.Namespace, n.SecretRef.Name, r.engines.identity(s)
	secrets, clientErr := r.engines.secretsOf(s)
	// Called by several delivery workers at once (one delivery per transition): it writes
	// only its own variables.
	return func(ctx context.Context, p notify.Provider) (notify.Provider, error) {
		var sec *corev1.Secret
		err := clientErr
		if err == nil {
			sec, err = secrets.Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		}
		if err != nil {
			err = fmt.Errorf("spec.notifications[%d].secretRef: Secret %s/%s read as %s: %w", i, ns, name, identity, err)
			if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsNotFound(err) {
				err = notify.Permanent(err) // the next transition reads it again
			}
			return p, err
		}
		if a := sec.Data["address"]; len(a) > 0 {
			p.Address = string(a)
		}
		if p.Type == notify.GenericHMAC {
			p.HMACKey = sec.Data["token"]
		} else {
			p.Token = string(sec.Data["token"])
		}
		p.Username, p.Password = string(sec.Data["username"]), string(sec.Data["password"])
		p.CABundle = sec.Data["ca.crt"]
		return p, nil
	}
}
