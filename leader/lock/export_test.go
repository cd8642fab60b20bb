package lock

import "strconv"

// Field returns the hash field of h's term in Redis: "TERM OWNER".
func Field(h *Hold) string { return strconv.FormatUint(h.l.term, 10) + " " + h.Owner() }
