// Command hello prints hello: the program kit_test.go builds with Build.
package main

import "fmt"

func main() { fmt.Println("hello") }
