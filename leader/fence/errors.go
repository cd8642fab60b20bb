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

// ErrClaimTimeout reports that, on PostgreSQL, Claim or Check waited for
// the election's fence lock longer than the Guard's lock timeout
// (WithLockTimeout). Nothing was changed and no verdict reached: the caller
// may retry, and a new leader must not write before its Claim succeeds.
// Errors from Claim, Check, Begin, Do and DoTerm wrap it.
var ErrClaimTimeout = errors.New("fence: lock timeout on the fence row")

// ErrHolderMismatch reports that the offered term is stored with another
// holder: Claim refuses a second holder of a term, and Check a transaction
// of a holder that did not claim it. Treat it as ErrStaleTerm: stop
// writing. Errors from Claim, Check, Begin, Do and DoTerm wrap it with the
// election, the term and both holders.
var ErrHolderMismatch = errors.New("fence: term held by another holder")
