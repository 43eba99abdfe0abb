package semaphore

// end is Call.End over Redis: it ends the oldest call of this process of
// exactly n units (as Release(n)). Until the Redis store settles weights,
// the call counts its estimate n in Redis: on the safe side when actual ≤ n.
func (r *redisSem) end(n, actual int64) {
	_ = actual
	r.release(n)
}
