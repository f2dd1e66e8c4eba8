from memstack.cli import main

main()
