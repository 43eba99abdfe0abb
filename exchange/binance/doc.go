// Package binance is the preset of Binance Spot's REST API rate limits
// (https://developers.binance.com/docs/binance-spot-api-docs/rest-api/limits)
// for package clientpool: [Spot] returns the limits as data, the rules and
// the weight of each endpoint under them.
//
//	pool, err := clientpool.New(binance.Spot())
//	client := &http.Client{Transport: httpclient.NewPool(pool)}
//
// Binance counts each limit in fixed windows aligned to the clock: a 1-minute
// window starts at every full minute UTC, a day at midnight UTC, and the
// count resets at each start. Every rule here counts the same way, aligned
// to the local clock (keep it in step with Binance's, NTP), and counts each
// call in every window from its start to its end
// (window.NewFixedCompletion): a request started just before a boundary may
// arrive just after it and count in the next window at the server, so the
// pool counts it in both and the server never sees more than N in one
// window when requests cross boundaries. The usage headers Binance returns
// (X-MBX-USED-WEIGHT-1M, X-MBX-ORDER-COUNT-10S and -1D) are read after every
// response (Rule.Usage): when the server counts more than the pool, for
// another process on the same IP or account, the pool counts it too, never
// less than the server's count shows; each count is read against the pool's
// own calls the server had surely counted, so that heavy calls in flight are
// not mistaken for another client's (clientpool's Ticket.ObserveHeaders).
//
// The keys:
//
//   - IP: the client's own address; REQUEST_WEIGHT and RAW_REQUESTS have the
//     single key "" (run one pool per outgoing address).
//   - account: the X-MBX-APIKEY request header ([HeaderAPIKey]), for the two
//     ORDERS limits. Binance counts unfilled orders per account, and an
//     order that fills gives its count back; the pool counts every order it
//     sends, so it never lets through more than Binance would, and may let
//     through fewer.
//
// A 429 or a 418 (IP ban) pauses REQUEST_WEIGHT, the only rule marked
// PauseOnThrottle: every request pays it, so the whole IP waits for the
// Retry-After. RAW_REQUESTS and the ORDERS rules are not marked, so that a
// 429 without Retry-After (Binance sends none when the order count is
// exceeded), which pauses each marked rule for its own window, does not hold
// the IP for 5 minutes or the account for a day.
//
// A request to an endpoint not in the table costs 1 REQUEST_WEIGHT and 1
// RAW_REQUESTS (Table.Default), the weight of most of Binance's other
// endpoints; add an Endpoint to the Table for one that weighs more.
//
// # Rules
//
// Section is the part of https://developers.binance.com/docs/binance-spot-api-docs/
// the rule is read from (Rule.Source); the values are those
// GET /api/v3/exchangeInfo reports in "rateLimits".
//
//	Rule            Limit       Key      Usage header           Pauses  Section
//	REQUEST_WEIGHT  6000/1m     IP       X-MBX-USED-WEIGHT-1M   yes     rest-api/limits#ip-limits
//	RAW_REQUESTS    61000/5m    IP       -                      no      enums#rate-limiters-ratelimittype
//	ORDERS_10S      100/10s     account  X-MBX-ORDER-COUNT-10S  no      rest-api/limits#unfilled-order-count
//	ORDERS_1D       200000/24h  account  X-MBX-ORDER-COUNT-1D   no      rest-api/limits#unfilled-order-count
//
// # Endpoints
//
// REQUEST_WEIGHT of each endpoint, and its units in each ORDERS rule; every
// request also costs 1 RAW_REQUESTS. Section is the endpoint's part of
// https://developers.binance.com/docs/binance-spot-api-docs/ (Endpoint.Source).
//
//	Method  Path                         REQUEST_WEIGHT                                            ORDERS  Section
//	GET     /api/v3/ping                 1                                                         -       rest-api/general-endpoints#test-connectivity
//	GET     /api/v3/time                 1                                                         -       rest-api/general-endpoints#check-server-time
//	GET     /api/v3/exchangeInfo         20                                                        -       rest-api/general-endpoints#exchange-information
//	GET     /api/v3/depth                limit<=100 (default): 5, <=500: 25, <=1000: 50, else 250  -       rest-api/market-data-endpoints#order-book
//	GET     /api/v3/trades               25                                                        -       rest-api/market-data-endpoints#recent-trades-list
//	GET     /api/v3/historicalTrades     25                                                        -       rest-api/market-data-endpoints#old-trade-lookup
//	GET     /api/v3/aggTrades            4                                                         -       rest-api/market-data-endpoints#compressedaggregate-trades-list
//	GET     /api/v3/klines               2                                                         -       rest-api/market-data-endpoints#klinecandlestick-data
//	GET     /api/v3/uiKlines             2                                                         -       rest-api/market-data-endpoints#uiklines
//	GET     /api/v3/avgPrice             2                                                         -       rest-api/market-data-endpoints#current-average-price
//	GET     /api/v3/ticker/24hr          symbol: 2; symbols<=20: 2, <=100: 40; else 80             -       rest-api/market-data-endpoints#24hr-ticker-price-change-statistics
//	GET     /api/v3/ticker/tradingDay    4 per symbol, at most 200; else 200                       -       rest-api/market-data-endpoints#trading-day-ticker
//	GET     /api/v3/ticker/price         symbol: 2; else 4                                         -       rest-api/market-data-endpoints#symbol-price-ticker
//	GET     /api/v3/ticker/bookTicker    symbol: 2; else 4                                         -       rest-api/market-data-endpoints#symbol-order-book-ticker
//	GET     /api/v3/ticker               4 per symbol, at most 200; else 200                       -       rest-api/market-data-endpoints#rolling-window-price-change-statistics
//	POST    /api/v3/order                1                                                         1       rest-api/trading-endpoints#new-order-trade
//	POST    /api/v3/order/test           computeCommissionRates=true: 20; else 1                   -       rest-api/trading-endpoints#test-new-order-trade
//	DELETE  /api/v3/order                1                                                         -       rest-api/trading-endpoints#cancel-order-trade
//	DELETE  /api/v3/openOrders           1                                                         -       rest-api/trading-endpoints#cancel-all-open-orders-on-a-symbol-trade
//	POST    /api/v3/order/cancelReplace  1                                                         1       rest-api/trading-endpoints#cancel-an-existing-order-and-send-a-new-order-trade
//	GET     /api/v3/account              20                                                        -       rest-api/account-endpoints#account-information-user_data
//	GET     /api/v3/order                4                                                         -       rest-api/account-endpoints#query-order-user_data
//	GET     /api/v3/openOrders           symbol: 6; else 80                                        -       rest-api/account-endpoints#current-open-orders-user_data
//	GET     /api/v3/allOrders            20                                                        -       rest-api/account-endpoints#all-orders-user_data
//	GET     /api/v3/orderList            4                                                         -       rest-api/account-endpoints#query-order-list-user_data
//	GET     /api/v3/allOrderList         20                                                        -       rest-api/account-endpoints#query-all-order-lists-user_data
//	GET     /api/v3/openOrderList        6                                                         -       rest-api/account-endpoints#query-open-order-lists-user_data
//	GET     /api/v3/myTrades             orderId: 5; else 20                                       -       rest-api/account-endpoints#account-trade-list-user_data
//	GET     /api/v3/rateLimit/order      40                                                        -       rest-api/account-endpoints#query-unfilled-order-count-user_data
//	GET     /api/v3/account/commission   20                                                        -       rest-api/account-endpoints#query-commission-rates-user_data
//	any     other                        1                                                         -       (Table.Default)
//
// # Updating
//
// The tables are two slice literals in binance.go, one line per rule and one
// per endpoint, and the Limit constants. After editing them, run
//
//	go test ./exchange/binance -run TestDocTable -update
//
// to rewrite the tables above; TestDocTable fails while they differ.
package binance
