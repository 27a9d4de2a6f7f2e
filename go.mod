module github.com/roompub/roompub

go 1.26.8

require (
	github.com/dlclark/regexp2/v2 v2.13.0
	github.com/gowebpki/jcs v1.0.2
	github.com/mr-tron/base58 v1.3.0
	github.com/santhosh-tekuri/jsonschema/v6 v6.0.3
	golang.org/x/text v0.43.0
)
