module github.com/ratesem/ratesem/grpcsem

go 1.25.0

replace github.com/ratesem/ratesem => ../

require (
	github.com/ratesem/ratesem v0.0.0
	go.uber.org/goleak v1.3.0
	google.golang.org/grpc v1.84.0
	google.golang.org/protobuf v1.36.11
)

require (
	github.com/dunglas/httpsfv v1.1.2 // indirect
	golang.org/x/net v0.57.0 // indirect
	golang.org/x/sys v0.47.0 // indirect
	golang.org/x/text v0.40.0 // indirect
	google.golang.org/genproto/googleapis/rpc v0.0.0-20260706201446-f0a921348800 // indirect
)
