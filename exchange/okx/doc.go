// Package okx is the preset of OKX's REST API v5 rate limits
// (https://www.okx.com/docs-v5/en/#overview-rate-limits) for package
// clientpool: [Table] returns the limits as data, the endpoints and the rules
// each request falls under, keyed the way OKX keys them, and [IsRateLimited]
// tells a throttled response (HTTP 429, or code 50011 with HTTP 200).
//
//	pool, err := clientpool.New(okx.Table())
//	client := &http.Client{Transport: httpclient.NewPool(pool, httpclient.WithThrottledBody(okx.IsRateLimited))}
//
// Every limit is N requests per 2 s ([Per]) for each key, counted with the
// completion window: a request's slot is reused only 2 s after its response
// ended, so OKX never sees more than N in any 2 s whatever the latency. The
// keys are made of:
//
//   - IP: the client's own address. One client has one, so it is the single
//     key "" (run one pool per outgoing address).
//   - UID: the OK-ACCESS-KEY request header ([HeaderAPIKey]). OKX counts per
//     user ID, so several API keys of one user share its limits, which the
//     pool cannot tell from the requests: use one API key per user, or lower
//     the limits (Pool.SetLimit).
//   - instId, instType: the query parameters of a GET; for a POST, the
//     "instId" field of its JSON body (of each order of a batch), read through
//     req.GetBody so the body is still sent. Options count per instrument
//     family, as OKX documents: BTC-USD-250328-100000-C counts as BTC-USD.
//
// A UID + instId key is "<OK-ACCESS-KEY>|<instId>".
//
// A throttled per-instrument (or per-instType) request pauses only that
// instrument's rule: those rules are marked PauseOnThrottle, while the IP-wide,
// UID-wide and sub-account rules are not (an endpoint under only such a rule
// is paused under it, as clientpool does when none is marked).
//
// Endpoints not in the table are not limited (Table.UnmatchedUnlimited).
// Place, amend and cancel are separate limits (OKX: "Rate limits for placing
// orders, amending orders, and cancelling orders are independent from each
// other"); the sub-account limit
// of 1000 new and amended orders per 2 s counts alongside the per-instrument
// ones, every order of a batch included, cancels not
// (https://www.okx.com/docs-v5/en/#overview-rate-limits-sub-account-rate-limit).
// A batch counts each order against its own instrument, so a batch over two
// instruments is charged to both; a batch of a single order counts as a
// single order, under place-order, as OKX documents.
//
// Not modelled: the lower limits of lead traders' instruments in copy
// trading, and the fill-ratio based sub-account limit of VIP5 and above.
//
// # Rules
//
// Limit is N per the window; Section is the part of
// https://www.okx.com/docs-v5/en/ the values are read from (Rule.Source).
//
//	Rule                  Limit    Key            Pauses  Section
//	instruments           20/2s    IP + instType  yes     #public-data-rest-api-get-instruments
//	tickers               20/2s    IP             no      #order-book-trading-market-data-get-tickers
//	books                 40/2s    IP             no      #order-book-trading-market-data-get-order-book
//	candles               40/2s    IP             no      #order-book-trading-market-data-get-candlesticks
//	history-candles       20/2s    IP             no      #order-book-trading-market-data-get-candlesticks-history
//	funding-rate          10/2s    IP + instId    yes     #public-data-rest-api-get-funding-rate
//	funding-rate-history  10/2s    IP + instId    yes     #public-data-rest-api-get-funding-rate-history
//	mark-price            10/2s    IP + instId    yes     #public-data-rest-api-get-mark-price
//	place-order           60/2s    UID + instId   yes     #order-book-trading-trade-post-place-order
//	cancel-order          60/2s    UID + instId   yes     #order-book-trading-trade-post-cancel-order
//	amend-order           60/2s    UID + instId   yes     #order-book-trading-trade-post-amend-order
//	batch-orders          300/2s   UID + instId   yes     #order-book-trading-trade-post-place-multiple-orders
//	order-details         60/2s    UID + instId   yes     #order-book-trading-trade-get-order-details
//	orders-pending        60/2s    UID            no      #order-book-trading-trade-get-order-list
//	balance               10/2s    UID            no      #trading-account-rest-api-get-balance
//	positions             10/2s    UID            no      #trading-account-rest-api-get-positions
//	sub-account-orders    1000/2s  UID            no      #overview-rate-limits-sub-account-rate-limit
//
// # Endpoints
//
// Each endpoint costs 1 under each of its rules unless said otherwise; its
// Source is the Section of its first rule.
//
//	Method  Path                                 Rules
//	GET     /api/v5/public/instruments           instruments
//	GET     /api/v5/market/tickers               tickers
//	GET     /api/v5/market/books                 books
//	GET     /api/v5/market/candles               candles
//	GET     /api/v5/market/history-candles       history-candles
//	GET     /api/v5/public/funding-rate          funding-rate
//	GET     /api/v5/public/funding-rate-history  funding-rate-history
//	GET     /api/v5/public/mark-price            mark-price
//	POST    /api/v5/trade/order                  place-order, sub-account-orders
//	POST    /api/v5/trade/cancel-order           cancel-order
//	POST    /api/v5/trade/amend-order            amend-order, sub-account-orders
//	POST    /api/v5/trade/batch-orders           batch-orders (1 per order, per instId; 1 order: place-order), sub-account-orders (1 per order)
//	GET     /api/v5/trade/order                  order-details
//	GET     /api/v5/trade/orders-pending         orders-pending
//	GET     /api/v5/account/balance              balance
//	GET     /api/v5/account/positions            positions
//
// # Updating
//
// The tables are two slice literals in okx.go, one line per rule and one per
// endpoint, and the Limit constants. After editing them, run
//
//	go test ./exchange/okx -run TestDocTable -update
//
// to rewrite the tables above; TestDocTable fails while they differ.
package okx
