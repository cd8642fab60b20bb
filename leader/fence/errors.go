package fence

import "errors"

// ErrStaleTerm reports that a higher term than the one offered is stored for
// the election: another leader has taken over, and the caller must stop
// writing. Errors from Claim, Check, Begin, Do and DoTerm wrap it with the
// election name and both terms; match it with errors.Is.
var ErrStaleTerm = errors.New("fence: stale term")

// ErrNotClaimed reports that Check found no claim of the offered term: the
// row for the election is missing, or holds a lower term. It means Claim was
// not called (or failed) for this term; the transaction is refused.
var ErrNotClaimed = errors.New("fence: term not claimed")

// ErrClaimTimeout reports that, on PostgreSQL, the election's fence lock
// (its advisory lock, or the fence row) stayed locked longer than the
// Guard's lock timeout (WithLockTimeout, default
// DefaultLockTimeout): Claim waited for a transaction that passed Check and
// did not end (its leader frozen inside it, say), or Check waited for a
// Claim that did not commit. Nothing was changed and no verdict was
// reached: the caller may retry (a new leader must not write before its
// Claim succeeds). Errors from Claim, Check, Begin, Do and DoTerm wrap it;
// match it with errors.Is.
var ErrClaimTimeout = errors.New("fence: lock timeout on the fence row")

// ErrHolderMismatch reports that the offered term is stored with another
// holder: Claim refuses to record a second holder of a term, and Check
// refuses a transaction of a holder that did not claim it. Two holders of
// one term mean the election handed the term out twice, or a term was
// made up or copied; the fence keeps the first holder. Treat it as
// ErrStaleTerm: stop writing. Errors from Claim, Check, Begin, Do and
// DoTerm wrap it with the election, the term and both holders.
var ErrHolderMismatch = errors.New("fence: term held by another holder")
