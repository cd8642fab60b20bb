package main

import (
	"context"
	"strings"
	"testing"
)

// The instances' documented user has no +scan (it would let them list
// every key of the database): solo forget, an operator's command, fails
// with it at exit 2 naming the rule to add, and works as the documented
// operators' user solo-admin, with an empty ACL LOG. Old code: the one
// documented user had +scan, and nothing showed that only forget used it.
func TestACL_ForgetNeedsTheOperatorUser(t *testing.T) {
	r := newACLRig(t)
	applyACL(t, r.admin, aclSetUser(t), "")
	applyACL(t, r.admin, aclSetUserOf(t, "solo-admin"), "")
	name := electionName(t)
	env := func(url string) []string { return append(testEnv(url, name, "a"), "SOLO_LOG_LEVEL=error") }
	if code, out := soloRun(t, env(r.url), "run", "--once", "--", "true"); code != 0 {
		t.Fatalf("solo run --once as solo: exit %d:\n%s", code, out)
	}
	code, out := soloRun(t, env(r.url), "forget", name)
	if code != exitUsage || !namesRule(out, "+scan") {
		t.Fatalf("solo forget as solo: exit %d, want 2 naming +scan:\n%s", code, out)
	}
	if err := r.admin.Do(context.Background(), "ACL", "LOG", "RESET").Err(); err != nil {
		t.Fatal(err)
	}
	adminURL := strings.Replace(r.url, "solo:pw@", "solo-admin:pw@", 1)
	code, out = soloRun(t, env(adminURL), "forget", name)
	if code != 0 || !strings.Contains(out, name+": forgot ") {
		t.Fatalf("solo forget as solo-admin: exit %d, want 0:\n%s", code, out)
	}
	for _, args := range [][]string{{"status", name}, {"resign", name}} {
		if code, out := soloRun(t, env(adminURL), args...); code != exitNoLeader {
			t.Fatalf("solo %v as solo-admin: exit %d, want 3 (no leader):\n%s", args, code, out)
		}
	}
	if n, err := r.admin.Do(context.Background(), "ACL", "LOG").Slice(); err != nil || len(n) != 0 {
		t.Fatalf("ACL LOG = %v %v, want empty", n, err)
	}
}
