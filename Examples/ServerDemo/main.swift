import UserSessions

print("ServerDemo: not implemented yet")
