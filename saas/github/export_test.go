package github

// The unexported constants, under the names the tests of package
// github_test use.
const (
	DocsURL         = docsURL
	HeaderLimit     = headerLimit
	HeaderRemaining = headerRemaining
	HeaderReset     = headerReset
	HeaderResource  = headerResource

	CPUPerMinute        = cpuPerMinute
	GraphQLCPUPerMinute = graphQLCPUPerMinute
	CPUUnit             = cpuUnit
	CPUEstimate         = cpuEstimate
	GraphQLPath         = graphQLPath
)

// CPUUnits is cpuUnits.
var CPUUnits = cpuUnits
