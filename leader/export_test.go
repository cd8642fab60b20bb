package leader

// WithTerm lets the external tests build a context as a term's function
// gets it.
var WithTerm = withTerm
