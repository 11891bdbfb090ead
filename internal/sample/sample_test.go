package sample

import (
	"encoding/json"
	"testing"
)

func TestOrderIsAnObjectOfAboutAHundredBytes(t *testing.T) {
	for _, i := range []int{0, 7, 123456, 1 << 40} {
		p := Order(make([]byte, 0, 128), i)
		var v map[string]any
		if err := json.Unmarshal(p, &v); err != nil {
			t.Fatalf("Order(%d) = %s: %v", i, p, err)
		}
		if v["order_id"] != float64(i) || v["currency"] != "EUR" {
			t.Fatalf("Order(%d) = %s", i, p)
		}
		if len(p) < 80 || len(p) > 128 {
			t.Fatalf("Order(%d) is %d bytes", i, len(p))
		}
	}
}
