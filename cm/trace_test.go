package cm_test

import (
	"flag"
	"fmt"
	"os"
	"sort"
	"sync"
	"testing"

	"softib/cm"
	"softib/internal/leakcheck"
)

// transitionLog collects every state transition any test's CM made, so
// that TestMain can report the table entries no test exercised.
type transitionLog struct {
	mu   sync.Mutex
	seen map[[2]cm.State]bool
}

func (l *transitionLog) StateChanged(_ *cm.ID, from, to cm.State) {
	l.mu.Lock()
	l.seen[[2]cm.State{from, to}] = true
	l.mu.Unlock()
}

var transitions = &transitionLog{seen: map[[2]cm.State]bool{}}

// TestMain fails a full run of the package (no -run filter) when an edge
// of the state table was never taken by any test, and any run that leaves
// goroutines behind (a CM's timer or dispatch loop not closed).
func TestMain(m *testing.M) {
	code := leakcheck.Run(m)
	var missing []string
	for _, from := range cm.States() {
		for _, to := range cm.States() {
			if cm.CanTransition(from, to) && !transitions.seen[[2]cm.State{from, to}] {
				missing = append(missing, fmt.Sprintf("%v→%v", from, to))
			}
		}
	}
	sort.Strings(missing)
	if f := flag.Lookup("test.run"); code == 0 && f != nil && f.Value.String() == "" && len(missing) > 0 {
		fmt.Printf("FAIL: state-table transitions no test took (%d): %v\n", len(missing), missing)
		code = 1
	}
	os.Exit(code)
}
