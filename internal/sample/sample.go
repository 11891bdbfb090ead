// Package sample builds the payloads rheo's benchmarks append, so that the
// peers benchmark (bench/) and the stores' own benchmarks measure the same
// bytes.
package sample

import "strconv"

// Order appends to buf[:0] the JSON object of order i, about 100 bytes:
// {"order_id":i,"customer":"c-…","amount_cents":…,"currency":"EUR",
// "status":"created","items":3}.
func Order(buf []byte, i int) []byte {
	buf = append(buf[:0], `{"order_id":`...)
	buf = strconv.AppendInt(buf, int64(i), 10)
	buf = append(buf, `,"customer":"c-`...)
	buf = strconv.AppendInt(buf, int64(i%977), 10)
	buf = append(buf, `","amount_cents":`...)
	buf = strconv.AppendInt(buf, int64(1000+i%50000), 10)
	buf = append(buf, `,"currency":"EUR","status":"created","items":3}`...)
	return buf
}
