// The fixture servers' launchers (FixtureServer, OAuthFixtureServer) and the shared transport suite live in the
// UserSessionsTestSupport target, which the integration tests and the benchmark use too; every test file sees them.
@_exported import UserSessionsTestSupport
