module github.com/ringlimit/ringlimit

go 1.26.0

require (
	github.com/cespare/xxhash/v2 v2.3.0 // indirect
	go.uber.org/goleak v1.3.0 // indirect
	golang.org/x/time v0.16.0 // indirect
	pgregory.net/rapid v1.3.0 // indirect
)
