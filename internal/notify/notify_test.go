package notify

import "testing"

func TestSignalReachesOnlyThatStreamAndCoalesces(t *testing.T) {
	var h Hub
	a, unsubA := h.Subscribe("a")
	b, unsubB := h.Subscribe("b")
	defer unsubB()
	h.Signal("a")
	h.Signal("a")
	select {
	case <-a:
	default:
		t.Fatal("subscriber of a was not signalled")
	}
	select {
	case <-a:
		t.Fatal("two signals did not coalesce into one")
	default:
	}
	select {
	case <-b:
		t.Fatal("subscriber of b was signalled by a change to a")
	default:
	}
	unsubA()
	unsubA() // idempotent
	h.Signal("a")
	select {
	case <-a:
		t.Fatal("an unsubscribed channel was signalled")
	default:
	}
	h.SignalAll()
	select {
	case <-b:
	default:
		t.Fatal("SignalAll missed b")
	}
}

func TestFirstAndLastHooksBracketSubscribers(t *testing.T) {
	var events []string
	h := &Hub{}
	h.OnFirst = func() { events = append(events, "first"); h.Signal("s") }
	h.OnLast = func() { events = append(events, "last") }
	_, u1 := h.Subscribe("s")
	_, u2 := h.Subscribe("t")
	u1()
	u2()
	_, u3 := h.Subscribe("s")
	u3()
	want := []string{"first", "last", "first", "last"}
	if len(events) != len(want) {
		t.Fatalf("hooks ran %v, want %v", events, want)
	}
	for i := range want {
		if events[i] != want[i] {
			t.Fatalf("hooks ran %v, want %v", events, want)
		}
	}
}
