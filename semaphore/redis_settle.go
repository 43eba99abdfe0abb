package semaphore

// end is Call.End over Redis: it ends the oldest call of this process of
// exactly n units (as Release(n)), settled to actual units in Redis in the
// background (redisSem.releaseSettled).
func (r *redisSem) end(n, actual int64) { r.releaseSettled(n, actual) }
