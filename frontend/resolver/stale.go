package resolver

import (
	"context"
	"errors"
	"time"

	"github.com/nodedns/nodedns/frontend/upstream"
)

// clientResponseTimer is how long a miss with an expired answer in the
// cache waits for the backend before that answer is served stale: RFC 8767
// section 5 suggests 1.8 seconds for this client response timer, so that
// a stub resolver gets an answer before its own timeout and retry. The
// backend's exchange goes on and refreshes the cache when it answers.
// Serving stale marks the refresh failed (cache.RefreshFailed), so that
// the next clients get the stale answer from the cache at once rather than
// each waiting out the timer again, until the refresh lands and replaces
// the entry (flight). A miss with nothing to serve instead waits for the
// backend as long as the upstream pool allows.
const clientResponseTimer = 1800 * time.Millisecond

// errClientTimer: the client response timer ran out before the backend
// answered; the exchange continues in the background.
var errClientTimer = errors.New("no answer within the client response timer (RFC 8767 section 5)")

// backendFailed reports whether err, the end of an exchange on ctx, is the
// backend's failure, after which an expired entry is served stale for
// cache.RecheckInterval without asking again (cache.RefreshFailed). Two
// ends are not: the frontend's own shutdown, and its own pool being full
// (upstream.ErrOverloaded, a limit on this node's misses that says nothing
// of the backend), after which the next miss asks again.
func backendFailed(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && !errors.Is(err, upstream.ErrOverloaded)
}
