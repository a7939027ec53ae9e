// Package proto holds the .proto sources of ringlimit's APIs and the Go code
// generated from them. Regenerate with `go generate ./proto`: it needs protoc
// from Debian's protobuf-compiler, and installs the two Go plugins at the
// versions pinned below.
package proto

//go:generate go install google.golang.org/protobuf/cmd/protoc-gen-go@v1.36.12
//go:generate go install google.golang.org/grpc/cmd/protoc-gen-go-grpc@v1.6.2
//go:generate sh -c "PATH=$(go env GOPATH)/bin:$PATH protoc -I . --go_out=. --go_opt=module=github.com/ringlimit/ringlimit/proto --go-grpc_out=. --go-grpc_opt=module=github.com/ringlimit/ringlimit/proto ringlimit/v1/ringlimit.proto peer/v1/peer.proto"
