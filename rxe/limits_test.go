package rxe_test

import (
	"errors"
	"testing"

	"softib/rxe"
	"softib/verbs"
)

// exhaust creates objects with mk until it fails, which must happen
// exactly after limit successes and with ErrResourceLimit; then one is
// freed and the next create succeeds. It returns the objects made.
func exhaust[T any](t *testing.T, what string, limit int, mk func() (T, error), free func(T) error) []T {
	t.Helper()
	var objs []T
	for {
		o, err := mk()
		if err != nil {
			if !errors.Is(err, verbs.ErrResourceLimit) {
				t.Fatalf("%s %d: %v, want ErrResourceLimit", what, len(objs)+1, err)
			}
			break
		}
		objs = append(objs, o)
		if len(objs) > limit {
			t.Fatalf("%s: more than the advertised %d", what, limit)
		}
	}
	if len(objs) != limit {
		t.Fatalf("%s: %d created, advertised %d", what, len(objs), limit)
	}
	if err := free(objs[len(objs)-1]); err != nil {
		t.Fatalf("%s: free: %v", what, err)
	}
	o, err := mk()
	if err != nil {
		t.Fatalf("%s: create after a free: %v", what, err)
	}
	objs[len(objs)-1] = o
	return objs
}

// TestResourceLimits: every object kind stops at the limit the device
// advertises with ErrResourceLimit (no panic, no silent overshoot), and
// a freed object makes room again.
func TestResourceLimits(t *testing.T) {
	if testing.Short() {
		t.Skip("creates the advertised maximum of every object")
	}
	d := openDev(t, rxe.Config{})
	attr := d.Query()
	pds := exhaust(t, "PD", attr.MaxPD, d.AllocPD, func(p verbs.PD) error { return p.Dealloc() })
	pd := pds[0]
	exhaust(t, "CQ", attr.MaxCQ, func() (verbs.CQ, error) { return d.CreateCQ(verbs.CQAttr{CQE: 1}) },
		func(c verbs.CQ) error { return c.Destroy() })
	buf := make([]byte, 64)
	exhaust(t, "MR", attr.MaxMR, func() (verbs.MR, error) { return pd.RegMR(buf, verbs.AccessLocalWrite) },
		func(m verbs.MR) error { return m.Dereg() })
	exhaust(t, "AH", attr.MaxAH, func() (verbs.AH, error) { a := ahTo(d); return pd.CreateAH(&a) },
		func(a verbs.AH) error { return a.Destroy() })
	exhaust(t, "SRQ", attr.MaxSRQ, func() (verbs.SRQ, error) {
		return pd.CreateSRQ(&verbs.SRQInitAttr{Attr: verbs.SRQAttr{MaxWR: 1, MaxSGE: 1}})
	}, func(s verbs.SRQ) error { return s.Destroy() })
}

// TestQPLimit: QP creation stops at MaxQP with ErrResourceLimit.
func TestQPLimit(t *testing.T) {
	if testing.Short() {
		t.Skip("creates the advertised maximum of QPs")
	}
	if raceEnabled {
		// Every QP has its goroutine; the race detector allows 8128.
		t.Skip("65536 QP goroutines exceed the race detector's limit; the non-race stage runs it")
	}
	d := openDev(t, rxe.Config{})
	pd, err := d.AllocPD()
	if err != nil {
		t.Fatal(err)
	}
	cq, err := d.CreateCQ(verbs.CQAttr{CQE: 16})
	if err != nil {
		t.Fatal(err)
	}
	init := &verbs.QPInitAttr{Type: verbs.QPTypeUD, SendCQ: cq, RecvCQ: cq, Cap: verbs.QPCap{MaxSendWR: 1, MaxRecvWR: 1, MaxSendSGE: 1, MaxRecvSGE: 1}}
	qps := exhaust(t, "QP", d.Query().MaxQP, func() (verbs.QP, error) { return pd.CreateQP(init) },
		func(q verbs.QP) error { return q.Destroy() })
	for _, q := range qps {
		q.Destroy()
	}
}
