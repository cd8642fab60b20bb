package worker

import (
	"fmt"
	"slices"
	"sort"
	"testing"
)

func jobNames(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return out
}

func keys(m map[string]bool) []string {
	var out []string
	for k, v := range m {
		if v {
			out = append(out, k)
		}
	}
	sort.Strings(out)
	return out
}

// TestPlan: the share counts only the members able to run a job, and a job that nobody with room can take is rescued by
// the least loaded member able to run it.
func TestPlan(t *testing.T) {
	twelve := jobNames("j", 12)
	three := jobNames("j", 3)
	set := func(names ...string) map[string]bool { return setOf(names) }
	tests := []struct {
		name        string
		mine, held  []string
		peers       []peer
		share       int
		floor       int
		unheld      []string
		rescue      []string
		room        []string
		lowPeer     bool
		firstMaxIsA bool
	}{
		{
			name:  "homogeneous: ceil(jobs/members)",
			mine:  twelve,
			held:  twelve[:4],
			peers: []peer{{Member: Member{ID: "b", Load: 4}, jobs: setOf(twelve), held: twelve[4:8]}, {Member: Member{ID: "c", Load: 4}, jobs: setOf(twelve), held: twelve[8:]}},
			share: 4, floor: 4, firstMaxIsA: true,
		},
		{
			name:  "a member with none of the jobs does not count",
			mine:  three,
			held:  three[:1],
			peers: []peer{{Member: Member{ID: "b", Load: 1}, jobs: setOf(three), held: three[1:2]}, {Member: Member{ID: "c", Load: 1}, jobs: set("other"), held: []string{"other"}}},
			share: 2, floor: 1, unheld: three[2:], firstMaxIsA: true,
		},
		{
			name:  "a member that publishes nothing (older solo) counts as able to run ours",
			mine:  three,
			held:  three[:1],
			peers: []peer{{Member: Member{ID: "b", Load: 1}}, {Member: Member{ID: "c", Load: 1}}},
			share: 1, floor: 1, unheld: three[1:], firstMaxIsA: true,
		},
		{
			name: "an unheld job only we can run, while we are at our share: rescued",
			mine: []string{"x", "y", "w"},
			held: []string{"x", "y"},
			peers: []peer{{Member: Member{ID: "b"}, jobs: set("x", "y")},
				{Member: Member{ID: "c"}, jobs: set("x", "y")}},
			// x and y: 1/3 each, w: 1 → ceil(1.67) = 2; b and c: ceil(0.67) = 1, with room.
			share: 2, floor: 1, unheld: []string{"w"}, rescue: []string{"w"}, room: []string{"x", "y"}, firstMaxIsA: true,
		},
		{
			name:  "an unheld job whose other members are full: the least loaded rescues",
			mine:  []string{"x", "w"},
			held:  []string{"x"},
			peers: []peer{{Member: Member{ID: "b", Load: 1}, jobs: set("x", "w"), held: []string{"x"}}},
			// x, w: 1/2 each → share 1 each; both at it; a (ID first, same load) rescues w.
			share: 1, floor: 1, unheld: []string{"w"}, rescue: []string{"w"}, firstMaxIsA: true,
		},
		{
			name:  "two below: a low peer",
			mine:  jobNames("j", 5),
			held:  jobNames("j", 3),
			peers: []peer{{Member: Member{ID: "b", Load: 2}, jobs: setOf(jobNames("j", 5)), held: jobNames("j", 5)[3:]}, {Member: Member{ID: "c", Load: 0}, jobs: setOf(jobNames("j", 5))}},
			share: 2, floor: 1, lowPeer: true, room: jobNames("j", 3), firstMaxIsA: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := plan("a", tt.mine, tt.held, tt.peers)
			if b.share != tt.share || b.floor != tt.floor {
				t.Errorf("share, floor = %d, %d; want %d, %d", b.share, b.floor, tt.share, tt.floor)
			}
			if !slices.Equal(b.unheld, tt.unheld) {
				t.Errorf("unheld %v, want %v", b.unheld, tt.unheld)
			}
			if got := keys(b.rescue); !slices.Equal(got, tt.rescue) {
				t.Errorf("rescue %v, want %v", got, tt.rescue)
			}
			if tt.room != nil {
				if got := keys(b.room); !slices.Equal(got, tt.room) {
					t.Errorf("room %v, want %v", got, tt.room)
				}
			}
			if b.lowPeer != tt.lowPeer {
				t.Errorf("lowPeer %v, want %v", b.lowPeer, tt.lowPeer)
			}
			if (b.firstMax == "a") != tt.firstMaxIsA {
				t.Errorf("firstMax %q", b.firstMax)
			}
		})
	}
}
