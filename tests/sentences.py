"""Sentences for the accuracy tests on a trained sentence-embedding model: 16 topics of 4, so
that every sentence has close neighbours, and a separate calibration set."""

TOPICS = [
    ["The cat is sleeping on the warm windowsill.", "A kitten naps in the sun by the window.",
     "My cat spends the afternoon dozing near the glass.", "The old tabby curled up on the sill and slept."],
    ["The stock market fell sharply this morning.", "Shares dropped steeply at the opening bell.",
     "Investors sold heavily and the index lost four percent.", "Equity prices tumbled in early trading."],
    ["She baked a chocolate cake for the party.", "He made a birthday cake with dark chocolate icing.",
     "The bakery sells fresh cakes every weekend.", "We decorated the sponge cake with strawberries."],
    ["The train to Berlin was delayed by two hours.", "Our flight to Madrid left late because of fog.",
     "Rail services were cancelled after the storm.", "The bus arrived forty minutes behind schedule."],
    ["Regular exercise improves heart health.", "Running three times a week lowers blood pressure.",
     "Doctors recommend daily walks for a healthy heart.", "Cycling to work keeps the cardiovascular system fit."],
    ["The new phone has a faster processor and a better camera.", "This laptop ships with more memory and a brighter screen.",
     "The latest tablet improves battery life by a third.", "The upgraded smartphone takes sharper photos at night."],
    ["Heavy rain is expected across the north tomorrow.", "Forecasters predict thunderstorms for the weekend.",
     "A cold front will bring snow to the mountains.", "The weather service issued a flood warning."],
    ["The team won the championship in extra time.", "The striker scored twice in the cup final.",
     "Fans celebrated the league title in the streets.", "The goalkeeper saved a penalty to seal the victory."],
    ["Python is a popular programming language for data science.", "Many engineers write machine learning code in Python.",
     "The library offers a simple interface for numerical computing.", "He rewrote the script in Rust to make it faster."],
    ["The museum opened an exhibition of impressionist paintings.", "A gallery downtown shows works by Monet and Renoir.",
     "The art show features landscapes from the nineteenth century.", "Visitors queued to see the famous portrait."],
    ["Plants convert sunlight into chemical energy.", "Photosynthesis takes place in the chloroplasts of leaves.",
     "Green algae also capture light to make sugars.", "Leaves absorb carbon dioxide and release oxygen."],
    ["The government announced new taxes on fuel.", "Parliament passed a law raising the income tax.",
     "The finance minister presented the annual budget.", "Officials debated a reform of the pension system."],
    ["He played a beautiful melody on the piano.", "The orchestra performed a symphony by Beethoven.",
     "She practices the violin every evening.", "The jazz band improvised for over an hour."],
    ["The astronauts docked with the space station.", "A rocket launched a new satellite into orbit.",
     "The probe sent back images of the outer planets.", "Engineers tested the lunar lander in the desert."],
    ["Please remember to lock the door when you leave.", "Don't forget to turn off the lights before going out.",
     "Make sure the windows are closed before you go.", "Check that the oven is off when you head out."],
    ["The hospital hired more nurses this year.", "Clinics are short of doctors in rural areas.",
     "The medical staff worked extra shifts during the outbreak.", "A new children's ward opened at the hospital."],
]
SENTENCES = [s for topic in TOPICS for s in topic]

CALIBRATION = [
    "The river flows slowly through the quiet valley.", "Our neighbours adopted a puppy last spring.",
    "Interest rates were left unchanged by the central bank.", "The recipe calls for two cups of flour.",
    "The conference will take place in Tokyo next year.", "A good night's sleep helps memory and mood.",
    "The software update fixes several security problems.", "Strong winds knocked down trees along the coast.",
    "The referee showed a red card in the second half.", "The compiler reports an error on line twelve.",
    "The novel tells the story of a family over three generations.", "Bees pollinate many of the crops we eat.",
    "The mayor promised to build more affordable housing.", "The choir sang traditional songs at the festival.",
    "The telescope observed a distant galaxy.", "Keep your passport in a safe place while travelling.",
]
