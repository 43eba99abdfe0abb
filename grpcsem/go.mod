module github.com/ratesem/ratesem/grpcsem

go 1.25.0

replace github.com/ratesem/ratesem => ../

require (
	github.com/ratesem/ratesem v0.0.0
	github.com/redis/go-redis/v9 v9.22.0
	go.uber.org/goleak v1.3.0
	google.golang.org/grpc v1.84.0
	google.golang.org/protobuf v1.36.11
)

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dunglas/httpsfv v1.1.2 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.40.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260706201446-f0a921348800 // indirect
)
