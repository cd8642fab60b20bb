package fence

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"regexp"
)

// identRE matches a table name that is safe to use unquoted.
var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]{0,62}(\.[A-Za-z_][A-Za-z0-9_]{0,62})?$`)

// querier is what load needs from a *sql.DB or *sql.Tx.
type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
}

// validate rejects input no election hands out. Term 0 is refused because it
// is what a missing term reads as, and terms above math.MaxInt64 because the
// column is a signed BIGINT.
func validate(name string, term uint64, holder string) error {
	if name == "" {
		return errors.New("fence: empty election name")
	}
	if term == 0 {
		return fmt.Errorf("fence: election %q: term 0 is not a term (missing term?)", name)
	}
	if term > math.MaxInt64 {
		return fmt.Errorf("fence: election %q: term %d exceeds the largest storable term %d", name, term, int64(math.MaxInt64))
	}
	if holder == "" {
		return fmt.Errorf("fence: election %q: empty holder (want the elector's ID)", name)
	}
	return nil
}

// row is the stored state of one election.
type row struct {
	term   int64
	holder sql.NullString // NULL in rows claimed before holders were recorded
}

// load reads the stored row; ok is false when it is missing.
func load(ctx context.Context, q querier, query, name string) (r row, ok bool, err error) {
	err = q.QueryRowContext(ctx, query, name).Scan(&r.term, &r.holder)
	if errors.Is(err, sql.ErrNoRows) {
		return row{}, false, nil
	}
	if err != nil {
		return row{}, false, err
	}
	if r.term < 0 {
		return row{}, false, fmt.Errorf("negative stored term %d", r.term)
	}
	return r, true, nil
}

// refuses returns the sentinel error r gives to term and holder, or nil if
// it accepts them. For a Claim (claim true) a lower stored term is not a
// refusal (the upsert raises it); for a Check it is ErrNotClaimed.
func (r row) refuses(term uint64, holder string, claim bool) error {
	switch s := uint64(r.term); {
	case s > term:
		return ErrStaleTerm
	case s < term && claim:
		return nil
	case s < term:
		return ErrNotClaimed
	case !r.holder.Valid || r.holder.String != holder:
		return ErrHolderMismatch
	}
	return nil
}

// verdict turns r into op's error for term and holder, nil if it accepts.
func (r row) verdict(op, name string, term uint64, holder string, claim bool) error {
	switch err := r.refuses(term, holder, claim); err {
	case nil:
		if claim && uint64(r.term) < term {
			// Only a concurrent DELETE or a lowered row gets here.
			return fmt.Errorf("fence: %s: refused, yet stored term %d is lower", op, r.term)
		}
		return nil
	case ErrStaleTerm:
		return staleErr(name, term, r)
	case ErrNotClaimed:
		return fmt.Errorf("%w: election %q: term %d, stored term %d is lower", ErrNotClaimed, name, term, r.term)
	default:
		by := fmt.Sprintf("holder %q", r.holder.String)
		if !r.holder.Valid {
			by = "no recorded holder (claimed before holders were recorded)"
		}
		return fmt.Errorf("%w: election %q: term %d is claimed by %s, not %q", ErrHolderMismatch, name, term, by, holder)
	}
}

func staleErr(name string, term uint64, r row) error {
	return fmt.Errorf("%w: election %q: offered term %d, stored term %d", ErrStaleTerm, name, term, r.term)
}

// rollback rolls tx back after err and returns err, joined with the
// rollback's own error unless the transaction was already over.
func rollback(tx *sql.Tx, err error) error {
	if rbErr := tx.Rollback(); rbErr != nil && !errors.Is(rbErr, sql.ErrTxDone) {
		return errors.Join(err, fmt.Errorf("fence: rollback: %w", rbErr))
	}
	return err
}
