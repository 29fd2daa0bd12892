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
// backend until Config.AnswerTimeout, and then gets SERVFAIL. The timer
// is the answer timeout when that is shorter.
const clientResponseTimer = 1800 * time.Millisecond

// errClientTimer: the client response timer ran out before the backend
// answered; the exchange continues in the background.
var errClientTimer = errors.New("no answer within the client response timer (RFC 8767 section 5)")

// errAnswerTimeout: Config.AnswerTimeout ran out before the backend
// answered a miss with nothing stale to serve, which is answered SERVFAIL;
// the exchange continues in the background and caches what it gets. That
// SERVFAIL is not cached: it tells of this wait, not of the name, and the
// exchange still running already spares the backend the client's retries,
// which join it; the answer it brings replaces nothing but is stored for
// the next try. A SERVFAIL from the backend itself is still cached by a
// miss that was there to get it (Config.Cache.ServfailTTL).
var errAnswerTimeout = errors.New("no answer within the answer timeout")

// backendFailed reports whether err, the end of an exchange on ctx, is the
// backend's failure, after which an expired entry is served stale for
// cache.RecheckInterval without asking again (cache.RefreshFailed). Two
// ends are not: the frontend's own shutdown, and its own pool being full
// (upstream.ErrOverloaded, a limit on this node's misses that says nothing
// of the backend), after which the next miss asks again.
func backendFailed(ctx context.Context, err error) bool {
	return err != nil && ctx.Err() == nil && !errors.Is(err, upstream.ErrOverloaded)
}
