package engine

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/fluxcd/cli-utils/pkg/kstatus/polling/event"
	"github.com/fluxcd/cli-utils/pkg/kstatus/status"
)

// TestCutShortReadsKeepTheLastStatus: a read that the wait's end cut short — its context
// ended, or client-go's rate limiter refused to wait past the deadline — says nothing of
// the object, so the wait keeps the status read before it; an object's own error does not
// count as cut short (otherwise the wait ends with "client rate limiter Wait returned an error:
// rate: Wait(n=1) would exceed context deadline" as a Deployment's message).
func TestCutShortReadsKeepTheLastStatus(t *testing.T) {
	limiter := fmt.Errorf("client rate limiter Wait returned an error: %w", errors.New("rate: Wait(n=1) would exceed context deadline"))
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{limiter, true},
		{fmt.Errorf("get: %w", context.DeadlineExceeded), true},
		{context.Canceled, true},
		{errors.New(`deployments.apps "web" is forbidden`), false},
		{nil, false},
	} {
		rs := &event.ResourceStatus{Status: status.UnknownStatus, Error: tc.err}
		if got := cutShort(rs); got != tc.want {
			t.Errorf("%v: cut short %v, want %v", tc.err, got, tc.want)
		}
	}
}
