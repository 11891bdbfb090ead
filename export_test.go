package rheo

import "time"

// SetSettleLingerForTest changes how long k's settles wait for others to
// share their backend call (see settleLoop): idle without a new settle,
// total at most.
func SetSettleLingerForTest(k *Consumer, idle, total time.Duration) {
	k.linger, k.maxLinger = idle, total
}
