package postgres

// AppendSQLForTest exposes the append statement to the package's tests.
func (b *Backend) AppendSQLForTest() string { return b.appendSQL }

// SettleSQLForTest exposes the settle statement to the package's tests.
func (b *Backend) SettleSQLForTest() string { return b.settleSQL }

// FetchSQLForTest exposes the fetch statement to the package's tests.
func (b *Backend) FetchSQLForTest() string { return b.fetchWait }
