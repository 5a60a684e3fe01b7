from zoo.launcher import main

main()
