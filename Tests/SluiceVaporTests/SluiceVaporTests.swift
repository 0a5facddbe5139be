// SluiceVaporTests
