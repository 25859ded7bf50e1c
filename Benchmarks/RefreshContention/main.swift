import UserSessions

print("RefreshContention: not implemented yet")
