module github.com/ratesem/ratesem/benchmarks

go 1.25.0

require (
	github.com/go-redis/redis_rate/v10 v10.0.1
	github.com/ratesem/ratesem v0.0.0
	github.com/redis/go-redis/v9 v9.22.0
	github.com/stretchr/testify v1.12.1
	go.uber.org/ratelimit v0.3.1
	golang.org/x/sync v0.22.0
	golang.org/x/time v0.15.0
)

require (
	github.com/benbjohnson/clock v1.3.5 // indirect
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	github.com/dunglas/httpsfv v1.1.2 // indirect
	go.uber.org/atomic v1.11.0 // indirect
	go.yaml.in/yaml/v3 v3.0.5 // indirect
	golang.org/x/sys v0.30.0 // indirect
)

replace github.com/ratesem/ratesem => ../
