package postgres

// OpenWith opens the store with the migrations migrations returns.
var OpenWith = open
