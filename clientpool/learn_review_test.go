package clientpool_test

import (
	"testing"
	"time"

	"github.com/ratesem/ratesem/clientpool"
)

// TestLearnLateReplyOfEndedWindowBothModes: a slow reply of the server's
// window that ended (0 left, its end just past, read with ResetMargin
// still ahead), which comes back after a reply of the next window set the
// key's budget, lowers the budget and moves the window's end with it, in
// both modes (a report lower than the budget is the latest the server
// counted: its window is the key's, as budgetLocked takes it in process).
// Over Redis it zeroed the budget until the end of the next window, a
// Per later (an hour for GitHub), while in process it held only until the
// late reply's end. Per 4 s: the first reply's window ends in 1.5 s; a
// call held across it; a reply of the next window (4 left, 4 s); the held
// call's reply (0 left, 100 ms); 1.5 s later the key's window has ended
// and a new one allows 5, in both modes, not 0.
func TestLearnLateReplyOfEndedWindowBothModes(t *testing.T) {
	per := 4 * time.Second
	table := clientpool.Table{Rules: []clientpool.Rule{quotaLearnRule(per)}}
	inBothModes(t, table, []int64{5}, func(t *testing.T, mk func() *clientpool.Pool) []int64 {
		p := mk()
		ch := clientpool.Charge{Rule: "api", Key: "k", Weight: 1}
		tk := acquire(t, p, ch)
		tk.ObserveHeaders(learnReply(5, 4, 1500))
		tk.Release()
		slow := acquire(t, p, ch)
		tk = acquire(t, p, ch)
		tk.ObserveHeaders(learnReply(5, 4, 4000))
		tk.Release()
		slow.ObserveHeaders(learnReply(5, 0, 100))
		slow.Release()
		time.Sleep(100*time.Millisecond + clientpool.ResetMargin + 400*time.Millisecond)
		return []int64{int64(holdN(t, p, ch, 40))}
	})
}
